"""docs/plugins.md's hook reference and SDK list are the code's: every core hookspec has a `### name(args)`
section with exactly its signature, every hook a plugin offers the others is in the table with its signature and
the plugin that declares it, every link there leads to a file of this repository, and the SDK list names exactly
`persmem_core.sdk.__all__`."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

from persmem_core import hookspecs
from persmem_core import sdk

ROOT = Path(__file__).parent.parent
DOC = ROOT / "docs" / "plugins.md"
PLUGIN_HOOKSPECS = sorted(ROOT.glob("plugins/*/persmem_*/hookspecs.py"))


def section(title: str) -> str:
    text = DOC.read_text()
    start = text.index(f"\n## {title}")
    end = text.find("\n## ", start + 1)
    return text[start:end if end != -1 else None]


def specs(module) -> dict[str, str]:
    """Each hookspec of `module` as `name(arg, ...)`."""
    marker = f"{hookspecs.PROJECT}_spec"
    return {name: f"{name}({', '.join(inspect.signature(fn).parameters)})"
            for name, fn in inspect.getmembers(module, inspect.isfunction) if hasattr(fn, marker)}


def test_every_core_hook_has_a_section_with_its_signature():
    documented = re.findall(r"^### `(\w+\(.*?\))`$", section("Hook reference"), re.M)
    assert sorted(documented) == sorted(specs(hookspecs).values())


def test_every_hook_a_plugin_offers_is_in_the_table_with_its_signature_and_its_declaring_plugin():
    table = section("Hook reference").split("### Hooks plugins offer each other", 1)[1]
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `(\w+\(.*?\))` \| \[\w+\]\(\.\./(\S+?)\)", table, re.M)}
    expected = {}
    for path in PLUGIN_HOOKSPECS:
        module = importlib.import_module(f"{path.parent.name}.hookspecs")
        expected |= {signature: str(path.relative_to(ROOT)) for signature in specs(module).values()}
    assert rows == expected


def test_every_link_of_the_reference_leads_to_a_file_here():
    links = re.findall(r"\]\((\.\./[^)]+|[\w-]+\.md)\)", section("Hook reference") + section("The SDK"))
    assert links
    for link in links:
        assert (DOC.parent / link).resolve().is_file(), link


def test_the_sdk_list_is_the_sdks_names():
    listed = set(re.findall(r"`(\w+)[`(]", section("The SDK")))
    assert set(sdk.__all__) <= listed, f"not in docs/plugins.md: {set(sdk.__all__) - listed}"
    classes = {name for name in listed if name[0].isupper() and not name.isupper()}  # CamelCase: a core type
    assert classes <= set(sdk.__all__), f"the page names {classes - set(sdk.__all__)}, which the SDK does not have"
