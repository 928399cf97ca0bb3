"""The field tables of docs/configuration.md, made from the config sections themselves: each field's default from
a fresh section, its meaning from its `msgspec.Meta` description. `persmem config reference` prints them and
`persmem config reference --write FILE` puts each one between its markers in FILE, so the page says what the code
does; `tests/test_config_reference.py` fails when docs/configuration.md and the code disagree.

A table's markers in the page:

    <!-- persmem config reference: memory -->
    (the generated table)
    <!-- end persmem config reference -->
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from persmem_core.config import json_schema

BLOCK = re.compile(r"(<!-- persmem config reference: (\w+) -->\n)(.*?)(<!-- end persmem config reference -->)", re.S)


def toml_value(value: Any) -> str:
    """`value` as it would be written in persmem.toml (inline)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}" if value else "{}"
    return repr(value)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def tables(sections: dict[str, type]) -> dict[str, str]:
    """Each section's Markdown table: field, default, meaning; fields in the order the section declares them."""
    definitions = json_schema(sections)["$defs"]
    out = {}
    for name, section_type in sorted(sections.items()):
        defaults = msgspec.to_builtins(section_type())
        described = definitions[section_type.__name__]["properties"]
        rows = ["| field | default | meaning |", "|---|---|---|"]
        for field in msgspec.structs.fields(section_type):
            meaning = described.get(field.encode_name, {}).get("description", "")
            rows.append(f"| `{field.encode_name}` | `{cell(toml_value(defaults[field.encode_name]))}` | {cell(meaning)} |")
        out[name] = "\n".join(rows) + "\n"
    return out


def rewrite(page: str, sections: dict[str, type]) -> tuple[str, list[str]]:
    """`page` with each marked table replaced by the generated one, and the sections that have no marked table
    (an empty list when every section is on the page). A marker naming a section no plugin declares is an error."""
    generated = tables(sections)
    unknown = sorted(set(marked_sections(page)) - set(generated))
    if unknown:
        raise ValueError(f"the page marks tables for sections no loaded plugin declares: {', '.join(unknown)}")
    new = BLOCK.sub(lambda m: m.group(1) + generated[m.group(2)] + m.group(4), page)
    return new, sorted(set(generated) - set(marked_sections(page)))


def marked_sections(page: str) -> list[str]:
    """The sections whose tables `page` marks, in page order."""
    return [m.group(2) for m in BLOCK.finditer(page)]
