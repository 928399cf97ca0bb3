"""The panel contract. A plugin adds a page to the dashboard by answering the dashboard's hook (hookspecs.py)

    @hookimpl
    def register_panels(register, host):
        register(
            "mail",                      # panel id: its URL is <dashboard>/mail
            title="Mail",                # the navigation label
            template=TEMPLATE,           # Jinja2 source, rendered with autoescape inside the layout
            context=lambda view: {...},  # called per request in a worker thread; its dict is `data` in the template
            order=30,                    # navigation order (small first)
            events=None,                 # optional: async generator function(view) yielding
                                         #   {"event": name, "data": json_text, "id": optional} -> SSE at <id>/events
            script=None,                 # optional: JavaScript source served at <id>/panel.js (CSP: same origin only)
        )

`view` (a View) carries the logged-in agent, the query parameters and the host; `view.markdown(text)` renders
Markdown to sanitised HTML (markdown.py; call it in `context` or `events`, which run off the event loop). In the
template, `data`, `view`, `base` (the dashboard's URL path), `chart(kind, title, mapping)` (an SVG chart, kind
"donut" or "bars") and `ago(iso_or_epoch)` are available. Everything is escaped unless a plugin marks it safe, so
memory and message text can never become markup. Plugins need not import Litestar or Jinja2: a panel is
plain data and functions.

Two plugins registering one panel id stop the server, naming both (as for tools, config sections and routes);
an invalid id, or a hook that raises, disables that plugin's panels and is shown on the System panel.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from persmem_core.sdk import PerPlugin, PluginConflictError, UserError, call_each

from .markdown import render_markdown

log = logging.getLogger("persmem.dashboard")
PANEL_ID = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class View:
    agent: str
    params: dict[str, str]
    host: Any
    base: str

    def param(self, name: str, default: str = "") -> str:
        return self.params.get(name, default).strip()

    @staticmethod
    def markdown(text: str | None) -> str:
        """`text` as Markdown rendered to sanitised HTML, marked safe for the template (markdown.py)."""
        return render_markdown(text)


@dataclass(frozen=True)
class Panel:
    id: str
    title: str
    template: str
    context: Callable[[View], dict]
    plugin: str
    order: int = 100
    events: Callable | None = None
    script: str | None = None
    extra: dict = field(default_factory=dict)


RESERVED = ("login", "logout", "static")  # the app's own pages


def collect_panels(host) -> tuple[list[Panel], list[str]]:
    """Every plugin's panels, in navigation order, and the problems found on the way.

    The core's rule for every registration kind: two plugins registering one panel id stop the server
    (PluginConflictError naming both); an invalid panel id, or a `register_panels` hook that raises, disables
    that plugin's panels, reported as a problem (System panel, server log)."""
    panels: dict[str, Panel] = {}
    problems: list[str] = []

    def factory(plugin: str):
        def register(panel_id: str, *, title: str, template: str, context: Callable[[View], dict], order: int = 100,
                     events: Callable | None = None, script: str | None = None) -> None:
            if not isinstance(panel_id, str) or not PANEL_ID.match(panel_id) or panel_id in RESERVED:
                raise UserError(f"panel id {panel_id!r} is not allowed (a-z, 0-9, _ and -; not "
                                f"{', '.join(RESERVED)})")
            if panel_id in panels:
                raise PluginConflictError.between(f"dashboard panel {panel_id!r}", panels[panel_id].plugin, plugin)
            panels[panel_id] = Panel(panel_id, title, template, context, plugin, order, events, script)

        return register

    for plugin, _, exc in call_each(host.pm, "register_panels", register=PerPlugin(factory), host=host):
        if isinstance(exc, PluginConflictError):
            raise exc
        if exc is not None:
            problems.append(f"plugin {plugin}: register_panels failed, its panels are disabled: "
                            f"{type(exc).__name__}: {exc}")
            panels = {pid: panel for pid, panel in panels.items() if panel.plugin != plugin}
    for problem in problems:
        log.warning("dashboard: %s", problem)
    return sorted(panels.values(), key=lambda p: (p.order, p.id)), problems
