"""Every hook is documented in its spec and in docs/plugins.md (as datasette checks its own)."""

from pathlib import Path

import pytest

from persmem_core import hookspecs

DOCS = (Path(__file__).parent.parent / "docs" / "plugins.md").read_text()
HOOKS = [name for name in dir(hookspecs) if hasattr(getattr(hookspecs, name), "persmem_spec")]


def test_there_are_hooks():
    assert {"register_config", "register_tools", "startup", "shutdown", "doctor", "backup"} <= set(HOOKS)


@pytest.mark.parametrize("name", HOOKS)
def test_hook_is_documented(name):
    assert getattr(hookspecs, name).__doc__, f"hookspec {name} has no docstring"
    assert f"`{name}`" in DOCS, f"docs/plugins.md does not describe {name}"
