"""Tool sets: which tools a connection lists, chosen per agent from named sets.

Every tool belongs to one set, named by the plugin that registers it (`register(fn, tool_set="memory")`; the
plugin's name when it says none): `memory`, `sessions`, `mail`, `chorus`, `workspace`, `web`, ... An agent is
given a list of sets (`persmem agent tools NAME --add workspace`, `persmem agent add NAME --tools ...`,
`persmem connect NAME --tools ...`); an agent that was never given any gets `[tools] default_sets` (memory,
sessions and mail). `all` stands for every set. A connection lists only its agent's sets, and a call to a tool
outside them is refused with the command that adds its set: each listed tool costs tokens in every session
(tool_costs.py counts them), and an assistant that already has a shell does not need a second one.

`host` below is a persmem_core.host.Host and `spec` one of its ToolSpecs (not imported: host.py checks set names
with this module's SET_NAME_RE).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from persmem_core.errors import UserError
from persmem_core.invocation import persmem_line

SET_NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
ALL_SETS = "all"
DEFAULT_SETS_ENV = "PERSMEM_DEFAULT_TOOL_SETS"


def known_sets(host) -> list[str]:
    """The sets the loaded plugins' tools belong to, sorted."""
    return sorted({spec.tool_set for spec in host.collect_tools()})


def parse_sets(host, text: str | Iterable[str]) -> list[str]:
    """`text` ("memory,mail" or a list) as a list of set names, each checked against the known sets (or `all`);
    an unknown one is refused naming the known sets."""
    names = [part.strip() for part in (text.split(",") if isinstance(text, str) else text) if part.strip()]
    if not names:
        raise UserError(f"name at least one tool set: {', '.join(known_sets(host))} or {ALL_SETS}.")
    known = set(known_sets(host))
    unknown = [name for name in names if name != ALL_SETS and name not in known]
    if unknown:
        raise UserError(f"unknown tool set{'s' if len(unknown) > 1 else ''} {', '.join(map(repr, unknown))}; the "
                        f"sets: {', '.join(sorted(known))}, or {ALL_SETS} for every one.")
    return list(dict.fromkeys(names))


def default_sets(host) -> list[str]:
    """The sets of an agent never given its own: PERSMEM_DEFAULT_TOOL_SETS (a,b), else `[tools] default_sets`."""
    from_env = host.environ.get(DEFAULT_SETS_ENV, "")
    if from_env.strip():
        return [part.strip() for part in from_env.split(",") if part.strip()]
    return list(host.section("tools").default_sets)


def sets_of(host, agent: str) -> list[str]:
    """The sets `agent` is given: its own choice, else the default sets."""
    record = host.agents.agents().get(agent)
    if record is not None and record.tool_sets is not None:
        return list(record.tool_sets)
    return default_sets(host)


def in_sets(spec, sets: Iterable[str]) -> bool:
    sets = set(sets)
    return ALL_SETS in sets or spec.tool_set in sets


def outside_sets_message(spec, agent: str, sets: list[str]) -> str:
    """A refused call to a tool outside the caller's sets: which set it is in and the command that adds it."""
    return (f"{spec.name} is in the tool set {spec.tool_set!r}, which agent {agent!r} is not given (its sets: "
            f"{', '.join(sets) or 'none'}). The operator adds it with `"
            f"{persmem_line('agent', 'tools', agent, '--add', spec.tool_set)}`; the client then lists it after a "
            "reconnect.")
