"""What the dashboard serves, gathered once when its app is built: every plugin's panels (panels.py), the
problems found collecting them, the [dashboard] settings and the dashboard's own files (the CSRF secret, the
login sessions' folder, both in <home>/dashboard).

Nothing of the dashboard lives in `host.state`: the app is its only user, and the app is built by the
`register_routes` hook (routes are fixed before any plugin's startup runs, and a panel conflict must stop the
server there, as a route conflict does) or by `persmem dashboard`. The Dashboard lives as long as that app.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

from persmem_core.sdk import atomic_write_bytes

from .config import DashboardConfig
from .panels import Panel, collect_panels

DATA_FOLDER = "dashboard"


@dataclass(frozen=True)
class Dashboard:
    config: DashboardConfig
    panels: list[Panel]  # in navigation order
    problems: list[str]  # panels of a plugin that were disabled, and why
    secret: str  # signs the CSRF tokens; kept across restarts so open forms stay valid
    sessions_dir: Path  # the server-side login sessions (sessions.py)
    secure: bool  # served over https ([server] public_url): cookies are Secure

    def panel(self, panel_id: str) -> Panel | None:
        return next((p for p in self.panels if p.id == panel_id), None)


def open_service(host) -> Dashboard:
    """Collect the panels (a PluginConflictError if two plugins claim one id) and open the dashboard's files."""
    panels, problems = collect_panels(host)
    folder = host.data_dir(DATA_FOLDER)
    sessions = folder / "sessions"
    sessions.mkdir(mode=0o700, exist_ok=True)
    return Dashboard(config=host.section("dashboard"), panels=panels, problems=problems, secret=_secret(folder),
                     sessions_dir=sessions, secure=(host.config.server.public_url or "").startswith("https://"))


def _secret(folder: Path) -> str:
    path = folder / "secret.key"
    if not path.exists():
        atomic_write_bytes(path, secrets.token_hex(32).encode(), mode=0o600)
    return path.read_text().strip()
