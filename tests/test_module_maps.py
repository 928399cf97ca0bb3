"""Each package's `__init__` docstring is its module map (every plugin, the core and each room of the core): every
module and sub-folder of the package is listed there with its job, and nothing is listed that is not there. A
module added without a line in the map fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


PACKAGES = sorted(ROOT.glob("plugins/*/persmem_*/__init__.py")) + sorted(
    p for p in ROOT.glob("persmem_core/*/**/__init__.py") if "__pycache__" not in str(p))


def listed_in(doc: str) -> set[str]:
    """The modules (`x.py`, or `x` in the oauth map) and folders (`x/`) a map's lines start with; a line may list a
    second one after a semicolon (`settings.py` in the core's map)."""
    names = set(re.findall(r"^\s*-\s*`?(\w+(?:\.py|/))`?", doc, re.M))
    names |= set(re.findall(r";\s*`(\w+\.py)`", doc))
    names |= {f"{name}.py" for name in re.findall(r"^\s*-\s*`(\w+)`:", doc, re.M)}
    return names


@pytest.mark.parametrize("init", PACKAGES, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_the_module_map_lists_every_module(init):
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    listed = listed_in(doc)
    modules = {p.name for p in init.parent.glob("*.py") if p.name != "__init__.py"}
    modules |= {f"{p.name}/" for p in init.parent.iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert modules - listed == set(), f"{init.relative_to(ROOT)} does not say what these do: {sorted(modules - listed)}"
    assert listed - modules == set(), f"{init.relative_to(ROOT)} lists modules that are gone: {sorted(listed - modules)}"


def test_the_architecture_page_names_every_room_of_the_core():
    """persmem_core/__init__ stays a short face; docs/architecture.md's table is the core's map."""
    table = (ROOT / "docs" / "architecture.md").read_text().split("## The core, room by room", 1)[1].split("\n## ", 1)[0]
    named = set(re.findall(r"`(\w+(?:\.py|/))`", table))
    core = ROOT / "persmem_core"
    rooms = {p.name for p in core.glob("*.py") if p.name not in ("__init__.py", "__main__.py")}
    rooms |= {f"{p.name}/" for p in core.iterdir() if p.is_dir() and p.name not in ("__pycache__", "plugin_template")}
    assert rooms - named == set(), f"docs/architecture.md does not place: {sorted(rooms - named)}"
    assert named - rooms == set(), f"docs/architecture.md names rooms that are gone: {sorted(named - rooms)}"
