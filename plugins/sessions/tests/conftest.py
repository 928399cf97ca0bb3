"""The sessions plugin's test fixtures; the helpers they share are in sessions_testkit.py."""

from pathlib import Path

import pytest


@pytest.fixture
def recorded(tmp_path) -> Path:
    """Where the recording plugin (recording_plugin.py) writes what `index_session_turns` received."""
    return tmp_path / "indexed.jsonl"
