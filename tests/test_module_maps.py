"""Each plugin's `__init__` docstring is its module map: every module of the package is listed there with its job,
and nothing is listed that is not there. A module added without a line in the map fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


@pytest.mark.parametrize("init", sorted(ROOT.glob("plugins/*/persmem_*/__init__.py")), ids=lambda p: p.parent.name)
def test_the_module_map_lists_every_module(init):
    doc = ast.get_docstring(ast.parse(init.read_text())) or ""
    listed = set(re.findall(r"^\s*-\s*`?(\w+\.py)`?", doc, re.M))
    modules = {p.name for p in init.parent.glob("*.py") if p.name != "__init__.py"}
    assert modules - listed == set(), f"{init.relative_to(ROOT)} does not say what these do: {sorted(modules - listed)}"
    assert listed - modules == set(), f"{init.relative_to(ROOT)} lists modules that are gone: {sorted(listed - modules)}"
