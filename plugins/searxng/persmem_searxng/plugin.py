"""The searxng plugin's hooks: the [searxng] section, web_search and web_fetch, the service they use
(service.py, in `host.state` from startup to shutdown), and a doctor check that asks SearXNG for JSON."""

from __future__ import annotations

from persmem_core.sdk import hookimpl

from .config import SearxngConfig


@hookimpl
def register_config(register):
    register("searxng", SearxngConfig)


@hookimpl
def register_tools(register, host):
    """web_search and web_fetch, in the `web` tool set, only once [searxng] url is set: a tool that can only fail
    would cost every session its definition and the assistant a wasted call."""
    from .tools import ALL_TOOLS

    if not host.section("searxng").url:
        return
    for tool in ALL_TOOLS:
        register(tool, tool_set="web")


@hookimpl
def startup(host):
    from .service import NAME, open_service

    host.state.put(NAME, open_service(host))


@hookimpl
def shutdown(host):
    from .service import NAME

    host.state.pop(NAME)  # hung name lookups are daemon threads: nothing to wait for


@hookimpl
def doctor(host):
    from persmem_core.sdk import UserError
    from persmem_core.sdk import fail, pass_, warn
    from persmem_core.sdk import networks_from

    from .search import search
    from .service import ALLOW_SETTING

    cfg = host.section("searxng")
    try:
        networks_from(cfg.fetch_allow_networks, ALLOW_SETTING)
    except UserError as exc:  # the server would not start, configured or not
        return [fail("searxng", str(exc))]
    if not cfg.url:
        return [pass_("searxng", "not configured ([searxng] url is unset), so web_search and web_fetch are not offered; "
                      "to offer them, run SearXNG with `json` in its search.formats and set [searxng] url, e.g. "
                      "http://127.0.0.1:8888")]
    try:
        search(cfg.url, "persmem doctor", 1, "", "", "", min(cfg.timeout, 5.0))
    except UserError as exc:
        return [warn("searxng", str(exc))]
    return [pass_("searxng", f"{cfg.url} answers JSON searches")]
