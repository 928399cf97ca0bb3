"""What the tool definitions cost: tokens of each tool as a client receives it (name, description, input schema),
per tool set and for an agent's sets. Every listed tool is paid for in every session, so `persmem doctor` and
`persmem connect` print these.

Counted with Claude's tokenizer: `tokenizer.json` as the Anthropic SDK shipped it (anthropic==0.38.0, the last
release that did; a dependency of persmem for this file only, never imported), read with the `tokenizers`
library. Without it the count is estimated (characters / 4) and says so.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

from persmem_core.tool_sets import ALL_SETS, in_sets

if TYPE_CHECKING:
    from persmem_core.host import Host

DEFAULT_BUDGET = 3000  # tokens the default sets' definitions may cost (issue: a memory tool first)


@functools.cache
def _tokenizer():
    try:
        spec = importlib.util.find_spec("anthropic")
        from tokenizers import Tokenizer
    except ImportError:
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        path = Path(folder) / "tokenizer.json"
        if path.is_file():
            return Tokenizer.from_file(str(path))
    return None


def count_tokens(text: str) -> tuple[int, bool]:
    """(tokens in `text`, whether counted by the tokenizer rather than estimated)."""
    tokenizer = _tokenizer()
    if tokenizer is None:
        return math.ceil(len(text) / 4), False
    return len(tokenizer.encode(text).ids), True


def tool_definitions(host: Host) -> dict[str, tuple[str, str]]:
    """{tool name: (its set, its definition as compact JSON text: what tools/list sends)}."""
    import anyio

    from persmem_core.transport.tools import build_mcp_server

    server = build_mcp_server(host)
    listed = anyio.run(server.list_tools)
    sets = {spec.name: spec.tool_set for spec in host.collect_tools()}
    return {tool.name: (sets.get(tool.name, ""), json.dumps(tool.model_dump(mode="json", by_alias=True,
                                                                            exclude_none=True),
                                                            separators=(",", ":"), ensure_ascii=False))
            for tool in listed}


class Costs:
    """Tokens per tool and per set of one host's tools."""

    def __init__(self, host: Host):
        self.host = host
        self.per_tool: dict[str, tuple[str, int]] = {}
        self.exact = True
        for name, (tool_set, text) in tool_definitions(host).items():
            tokens, exact = count_tokens(text)
            self.per_tool[name] = (tool_set, tokens)
            self.exact &= exact

    def of_sets(self, sets) -> int:
        """Tokens of every tool in `sets` (`all` included)."""
        specs = {spec.name: spec for spec in self.host.collect_tools()}
        return sum(tokens for name, (_, tokens) in self.per_tool.items() if name in specs
                   and in_sets(specs[name], sets))

    def per_set(self) -> dict[str, tuple[int, int]]:
        """{set: (tools, tokens)}, sorted by set name."""
        found: dict[str, list[int]] = {}
        for tool_set, tokens in self.per_tool.values():
            found.setdefault(tool_set, []).append(tokens)
        return {name: (len(found[name]), sum(found[name])) for name in sorted(found)}

    def unit(self) -> str:
        return "tokens" if self.exact else "tokens (estimated: characters / 4; Claude's tokenizer file is missing)"

    def summary(self) -> str:
        """`memory 1,234 (12 tools), mail 456 (8 tools), ...; all 9,999` in this host's unit."""
        parts = [f"{name} {tokens:,} ({count} tool{'s' if count != 1 else ''})"
                 for name, (count, tokens) in self.per_set().items()]
        return ", ".join(parts) + f"; {ALL_SETS} {self.of_sets([ALL_SETS]):,} {self.unit()}"


def tool_sets_text(host, name: str) -> str:
    """For `persmem agent tools` and `persmem connect`: what agent `name` is given and what it costs, then the
    other sets and how to add one."""
    from persmem_core.invocation import persmem_line
    from persmem_core.tool_sets import sets_of

    costs, sets = Costs(host), sets_of(host, name)
    record = host.agents.agents().get(name)
    chosen = "" if record is not None and record.tool_sets is not None else " ([tools] default_sets)"
    lines = [f"agent {name}: tool sets {', '.join(sets) or 'none'}{chosen}: {costs.of_sets(sets):,} "
             f"{costs.unit()} of tool definitions in every session"]
    others = [(set_name, count, tokens) for set_name, (count, tokens) in costs.per_set().items()
              if ALL_SETS not in sets and set_name not in sets]
    if others:
        lines.append("  not given: " + ", ".join(f"{n} (+{t:,}, {c} tool{'s' if c != 1 else ''})"
                                                 for n, c, t in others))
        lines.append(f"  add sets: {persmem_line('agent', 'tools', name, '--add', 'SET[,SET...]')}")
    return "\n".join(lines)
