"""docs/configuration.md's field tables are what `persmem config reference` makes from the code: every section of
every plugin in this repository has its table, every field its default and description, and a default or a
description changed in code without `persmem config reference --write docs/configuration.md` fails here."""

from __future__ import annotations

import subprocess
from pathlib import Path

import msgspec
import pytest

from persmem_core.config_reference import marked_sections, rewrite, tables, toml_value
from persmem_core.transport.server_process import persmem_command

DOC = Path(__file__).parent.parent / "docs" / "configuration.md"


def test_the_page_is_what_the_code_makes(persmem_host):
    host = persmem_host()
    sections = {name: typ for name, (typ, _) in host.sections.items()}
    assert {"server", "memory", "amq", "shell", "git", "searxng", "sessions", "dashboard"} <= set(sections)
    page = DOC.read_text()
    regenerated, unmarked = rewrite(page, sections)
    assert not unmarked, f"docs/configuration.md has no table for {unmarked}"
    assert len(marked_sections(page)) == len(set(marked_sections(page))), "a section's table is marked twice"
    assert regenerated == page, "docs/configuration.md differs from the code: run persmem config reference --write"


def test_every_field_has_a_description(persmem_host):
    host = persmem_host()
    for name, table in tables({n: t for n, (t, _) in host.sections.items()}).items():
        for row in table.splitlines()[2:]:
            assert not row.endswith("|  |"), f"[{name}] {row.split('|')[1].strip()} has no Meta(description=...)"


def test_a_changed_default_shows_as_a_difference():
    class Bookmarks(msgspec.Struct, kw_only=True):
        keep: int = msgspec.field(default=10)

    page = "## [bookmarks]\n\n<!-- persmem config reference: bookmarks -->\nold\n<!-- end persmem config reference -->\n"
    new, unmarked = rewrite(page, {"bookmarks": Bookmarks})
    assert "| `keep` | `10` |" in new and not unmarked
    with pytest.raises(ValueError, match="no loaded plugin declares: gone"):
        rewrite(page.replace("bookmarks -->", "gone -->"), {"bookmarks": Bookmarks})


def test_defaults_read_as_toml():
    assert [toml_value(v) for v in (True, "a\"b", [1, "x"], {"episodic": 0.9}, {}, 2.5)] == [
        "true", '"a\\"b"', '[1, "x"]', "{episodic = 0.9}", "{}", "2.5"]


def test_the_command_prints_and_writes(tmp_path, persmem_env):
    env = persmem_env()
    printed = subprocess.run(persmem_command("config", "reference"), env=env, capture_output=True, text=True,
                             check=True).stdout
    assert "## [memory]" in printed and "| `search_waits_ms` |" in printed
    page = tmp_path / "page.md"
    page.write_text("<!-- persmem config reference: server -->\n<!-- end persmem config reference -->\n")
    done = subprocess.run(persmem_command("config", "reference", "--write", str(page)), env=env,
                          capture_output=True, text=True, check=True).stdout
    assert "no marked table for" in done and "| `port` | `8765` |" in page.read_text()
