"""The service is the only door for what acts for an agent: the tools, the dashboard panels and the answers to the
sessions plugin read and write through `MemoryService.as_agent(agent)` (access.py), which applies the permission
rules, so a new entry point of these kinds cannot forget them and expose a private collection. Structure here;
what the rules do is tested through real servers (test_private_collections.py, test_memory_permissions.py)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).parent.parent / "persmem_memory_hnsw"
FOR_AN_AGENT = sorted([*PACKAGE.glob("tools/*.py"), PACKAGE / "panels.py", PACKAGE / "sessions_answers.py"])
RULES = {"own_filters", "visible_to", "check_visible", "is_private", "editors_in", "pinned_for", "may_edit",
         "check_change", "check_bootstrap_owner"}


def calls_and_imports(path: Path) -> tuple[set[str], set[str]]:
    """(names imported from permissions, methods called on anything) in `path`."""
    imported, called = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").endswith("permissions"):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            called.add(node.func.attr)
    return imported, called


@pytest.mark.parametrize("path", FOR_AN_AGENT, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_what_acts_for_an_agent_goes_through_the_door(path):
    imported, called = calls_and_imports(path)
    assert not imported & RULES, f"{path.name} applies permission rules itself ({imported & RULES}): use access.py"
    assert "collection" not in called and "collections" not in called, (
        f"{path.name} opens a collection past the door: use service(host).as_agent(agent)")


def test_the_door_applies_every_rule_it_names():
    imported, _ = calls_and_imports(PACKAGE / "access.py")
    assert {"own_filters", "visible_to", "check_visible", "is_private", "editors_in", "pinned_for"} <= imported
