"""A started Host that answers the sessions plugin's questions as that plugin asks them (`host.hook.X(...)`),
and turns shaped like the ones its worker hands over."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from persmem_core.sdk.testing import Host, clean_env, write_config

SESSIONS_PLUGIN = Path(__file__).parents[2] / "sessions"


def sessions_hookspecs():
    """The sessions plugin's hookspecs module (from its folder while the plugin is not installed yet)."""
    if importlib.util.find_spec("persmem_sessions") is None:
        sys.path.insert(0, str(SESSIONS_PLUGIN))
    from persmem_sessions import hookspecs

    return hookspecs


def started_host(home: Path, config: dict | None = None) -> Host:
    """A Host in `home`, started. When the sessions plugin is installed its own add_hookspecs adds the questions;
    otherwise they are added here, as that hook would."""
    write_config(home, config)
    host = Host(environ=clean_env(home))
    asked = getattr(host.hook, "index_session_turns", None)
    if asked is None or asked.spec is None:
        host.pm.add_hookspecs(sessions_hookspecs())
    host.startup()
    return host


def turn(index: int, text: str, *, session_id: str = "3f1c9a2e-sess-one", client: str = "claude",
         role: str = "user", project: str = "acme", cwd: str = "/home/me/src/acme",
         time: str = "2026-03-01T10:00:00Z") -> dict:
    return {"session_id": session_id, "client": client, "index": index, "role": role, "text": text, "time": time,
            "cwd": cwd, "project": project}
