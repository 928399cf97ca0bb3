"""The dashboard's Litestar app: login with an agent's token, a server-side session (sessions.py), CSRF on
every form, security headers on every answer (errors included), and one page (plus optional event stream, ended
with its login by streams.py, and script) per panel.

Mounted inside `persmem serve` at [dashboard] prefix (the host passes it through without agent auth: this
app checks its own session), or served alone by `persmem dashboard`."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from dataclasses import dataclass
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any

import anyio
from jinja2 import ChoiceLoader, DictLoader, Environment, PackageLoader, select_autoescape
from litestar import Litestar, Request, Response, get, post
from litestar.config.csrf import CSRFConfig
from litestar.datastructures import MutableScopeHeaders
from litestar.exceptions import NotAuthorizedException, NotFoundException
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.response import Redirect, ServerSentEvent, Template
from litestar.response.sse import ServerSentEventMessage
from litestar.static_files import create_static_files_router
from litestar.stores.file import FileStore
from litestar.template.config import TemplateConfig

from persmem_core.sdk import UserError

from .charts import chart
from .markdown import render_markdown
from .panels import Panel, View
from .service import Dashboard, open_service
from .sessions import LoginSessionConfig
from .streams import ends_with_the_login, is_active

log = logging.getLogger("persmem.dashboard")

CSP = ("default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'; "
       "frame-ancestors 'none'; form-action 'self'; base-uri 'none'; object-src 'none'")
SECURITY_HEADERS = {"X-Frame-Options": "DENY", "Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff",
                    "Referrer-Policy": "same-origin", "Cache-Control": "no-store"}


def ago(value: Any) -> str:
    """'3 min ago' for an ISO date or epoch seconds."""
    try:
        when = datetime.fromisoformat(value).timestamp() if isinstance(value, str) else float(value)
    except (TypeError, ValueError):
        return ""
    delta = time.time() - when
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if delta >= size:
            return f"{int(delta // size)} {unit} ago"
    return "just now"


def build_dashboard(host, base: str, dashboard: Dashboard | None = None) -> Litestar:
    """The app; `base` is the URL path it is served under (for links and cookie paths); `dashboard`: its panels
    and files (service.open_service) when already opened. Two plugins registering one panel id stop it in
    open_service (PluginConflictError), before anything is served."""
    dashboard = dashboard or open_service(host)
    site = Site(host, dashboard, base)
    session_config = login_session_config(dashboard, base)
    static_dir = Path(str(resources.files("persmem_dashboard") / "static"))
    return Litestar(
        route_handlers=[*login_handlers(site), *panel_handlers(site, session_config),
                        create_static_files_router(path="/static", directories=[static_dir], name="static")],
        template_config=TemplateConfig(engine=JinjaTemplateEngine.from_environment(templates(dashboard, base))),
        csrf_config=CSRFConfig(secret=dashboard.secret, cookie_path=base or "/", cookie_secure=dashboard.secure,
                               cookie_httponly=True, cookie_samesite="strict", cookie_name="persmem_csrf"),
        middleware=[session_config.middleware],
        stores={"sessions": FileStore(dashboard.sessions_dir)},
        exception_handlers={NotAuthorizedException: to_login(base), NotFoundException: not_found},
        before_send=[security_headers],
        debug=False,
        logging_config=None,
    )


def login_session_config(dashboard: Dashboard, base: str) -> LoginSessionConfig:
    """The login cookie: lasts [dashboard] session_hours, sent only under `base`, Secure over https."""
    return LoginSessionConfig(key="persmem_session", max_age=max(1, round(dashboard.config.session_hours * 3600)),
                              path=base or "/", secure=dashboard.secure, httponly=True, samesite="strict",
                              store="sessions")


def templates(dashboard: Dashboard, base: str) -> Environment:
    """The Jinja environment: the layout's templates and each panel's (as `panels/<id>.html`), autoescaped, with
    what every template may use (chart, ago, markdown, base, title)."""
    env = Environment(loader=ChoiceLoader([DictLoader({f"panels/{p.id}.html": p.template for p in dashboard.panels}),
                                           PackageLoader("persmem_dashboard", "templates")]),
                      autoescape=select_autoescape(default=True, default_for_string=True))
    env.globals.update(chart=chart, ago=ago, markdown=render_markdown, base=base, title=dashboard.config.title)
    env.filters["tojson_pretty"] = lambda v: json.dumps(v, indent=2, ensure_ascii=False)
    return env


@dataclass(frozen=True)
class Site:
    """What every handler asks: who is logged in (a revoked or rotated token ends the login), a page inside the
    layout, a panel by its id, and the View a panel is given."""

    host: Any
    dashboard: Dashboard
    base: str

    def agent_of(self, request: Request) -> str:
        agent = request.session.get("agent") if request.session else None
        if agent and not is_active(self.host, agent, request.session.get("credential")):  # revoked or rotated
            request.clear_session()  # (so adding the agent again later does not revive it)
            agent = None
        if not agent:
            raise NotAuthorizedException("log in first")
        return agent

    def page(self, name: str, status: int = 200, **context) -> Template:
        nav = [(p.id, p.title) for p in self.dashboard.panels]
        return Template(template_name=name, status_code=status,
                        context={"nav": nav, "problems": self.dashboard.problems, **context})

    def panel_or_404(self, panel_id: str) -> Panel:
        panel = self.dashboard.panel(panel_id)
        if panel is None:
            raise NotFoundException(f"no panel {panel_id!r}")
        return panel

    def view_of(self, request: Request) -> View:
        return View(self.agent_of(request), {k: v for k, v in request.query_params.items()}, self.host, self.base)


def login_handlers(site: Site) -> list:
    """`/` (to the first panel), the login form, logging in with an agent's token, and logging out."""
    host, base, cfg, panels = site.host, site.base, site.dashboard.config, site.dashboard.panels

    @get("/", name="home")
    async def home(request: Request) -> Redirect:
        site.agent_of(request)
        return Redirect(f"{base}/{panels[0].id}" if panels else f"{base}/login")

    @get("/login", name="login_form")
    async def login_form(request: Request) -> Template:
        return site.page("login.html", agent=None)

    @post("/login", name="login")
    async def login(request: Request) -> Response:
        form = await request.form()
        token = str(form.get("token", "")).strip()
        agent = host.agents.agent_for_token(token) if token else None
        if agent is None or (cfg.login_agents and agent not in cfg.login_agents):
            client = request.client.host if request.client else "unknown"
            await asyncio.sleep(host.auth_failures.failed(client))  # logged for fail2ban, slowed per address
            return site.page("login.html", status=401, agent=None, error="That token is not valid for the dashboard.")
        credential = host.agents.agents()[agent].token_sha256  # the login lasts while this token does
        request.set_session({"agent": agent, "since": time.time(), "credential": credential})  # new id: sessions.py
        log.info("dashboard: %s logged in", agent)
        return Redirect(f"{base}/")

    @post("/logout", name="logout")
    async def logout(request: Request) -> Redirect:
        request.clear_session()
        return Redirect(f"{base}/login")

    return [home, login_form, login, logout]


def panel_handlers(site: Site, session_config: LoginSessionConfig) -> list:
    """Each panel's page (its context run in a worker thread; its failure shown, never the dashboard's), its event
    stream (ended with the login, and never sending what comes after a revocation) and its script."""
    host = site.host

    @get("/{panel_id:str}", name="panel")
    async def show(request: Request, panel_id: str) -> Template:
        panel = site.panel_or_404(panel_id)
        view = site.view_of(request)
        error = None
        try:
            data = await anyio.to_thread.run_sync(panel.context, view)
        except UserError as exc:
            data, error = {}, str(exc)
        except Exception:  # noqa: BLE001 - a panel's bug must not take the dashboard down
            ref = secrets.token_hex(4)
            log.exception("dashboard: panel %s failed (ref %s)", panel.id, ref)
            data, error = {}, f"this panel failed (log reference {ref})"
        return site.page("panel.html", panel=panel, data=data, view=view, error=error, agent=view.agent)

    @get("/{panel_id:str}/events", name="events", middleware=[ends_with_the_login(host, session_config)])
    async def events(request: Request, panel_id: str) -> ServerSentEvent:
        panel = site.panel_or_404(panel_id)
        if panel.events is None:
            raise NotFoundException(f"panel {panel_id!r} has no event stream")
        view = site.view_of(request)
        credential = request.session.get("credential")

        async def stream():
            async for item in panel.events(view):
                if not is_active(host, view.agent, credential):  # written after the revocation: never sent
                    return
                yield ServerSentEventMessage(data=item.get("data", ""), event=item.get("event"), id=item.get("id"))

        return ServerSentEvent(stream(), headers={"X-Accel-Buffering": "no"})

    @get("/{panel_id:str}/panel.js", name="panel_script", media_type="application/javascript")
    async def panel_script(request: Request, panel_id: str) -> Response:
        panel = site.panel_or_404(panel_id)
        site.agent_of(request)
        if not panel.script:
            raise NotFoundException("no script")
        return Response(panel.script, media_type="application/javascript")

    return [show, events, panel_script]


def to_login(base: str):
    """Not logged in: a browser's page goes to the login form; an event stream or a script gets a 401."""

    def handler(request: Request, exc: Exception) -> Response:
        if request.url.path.endswith(("/events", ".js")) or "text/event-stream" in request.headers.get("accept", ""):
            return Response({"error": "log in first"}, status_code=401)
        return Redirect(f"{base}/login", status_code=303)

    return handler


def not_found(request: Request, exc: Exception) -> Response:
    return Response(f"Not found: {exc}", status_code=404, media_type="text/plain")


async def security_headers(message, scope) -> None:
    """SECURITY_HEADERS on every answer."""
    # on the ASGI message, not the Response: error answers (401, 404, 405, CSRF's 403) never pass after_request
    if message["type"] == "http.response.start":
        headers = MutableScopeHeaders.from_message(message)
        for name, value in SECURITY_HEADERS.items():
            headers[name] = value
