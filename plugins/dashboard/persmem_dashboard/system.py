"""The dashboard's own panel: installed plugins and their versions, plugin problems (load failures here,
disabled panels from the app's `problems`), `persmem doctor`, agents and when each was last seen (since this
server started)."""

from __future__ import annotations

from importlib import resources

from .panels import View

TEMPLATE = (resources.files("persmem_dashboard") / "templates" / "system.html").read_text()


def context(view: View) -> dict:
    from persmem_core.sdk import run_doctor

    host = view.host
    agents = []
    for name, record in sorted(host.agents.agents().items()):
        if record.revoked:
            continue
        creds = [kind for kind, value in (("token", record.token_sha256), ("secret path", record.path_sha256)) if value]
        agents.append({"name": name, "created": record.created, "last_seen": host.agents.last_seen.get(name),
                       "credentials": ", ".join(creds)})
    return {
        "plugins": [{"name": p.name, "version": p.version, "hooks": p.hooks} for p in host.loaded_plugins()],
        # plugins that failed to load; the template adds `problems`, the panels the app could not take
        "problems": [f"{p.name}: {p.error}" for p in host.plugins if p.error],
        "agents": agents,
        "doctor": [{"status": str(c.status), "name": c.name, "detail": c.detail} for c in run_doctor(host)],
    }
