"""The hook the dashboard asks other plugins, without importing them: their pages on the dashboard.

The dashboard calls it plugin by plugin (`call_each`, as the host calls its own hooks), so it knows whose panel
is whose and one plugin's failure disables only that plugin's panels. Where the dashboard is not installed,
nobody calls it, and plugins that answer it load as ever.
"""

from __future__ import annotations

from persmem_core.sdk import hookspec


@hookspec
def register_panels(register, host):
    """Contribute dashboard panels: `register("id", title=..., template=..., context=fn(view) -> dict, order=100,
    events=None, script=None)` (panels.py documents each argument); an id two plugins register stops the server,
    like every other conflict."""
