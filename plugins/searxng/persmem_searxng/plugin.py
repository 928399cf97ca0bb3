"""The searxng plugin's hooks: the [searxng] section, web_search and web_fetch, and a doctor check that
asks SearXNG for JSON."""

from __future__ import annotations

from persmem_core import hookimpl

from .config import SearxngConfig


@hookimpl
def register_config(register):
    register("searxng", SearxngConfig)


@hookimpl
def register_tools(register):
    from .tools import ALL_TOOLS

    for tool in ALL_TOOLS:
        register(tool)


@hookimpl
def doctor(host):
    from persmem_core import UserError
    from persmem_core.doctor import pass_, warn

    from .search import search

    cfg = host.section("searxng")
    try:
        search(cfg.url, "persmem doctor", 1, "", "", "", min(cfg.timeout, 5.0))
    except UserError as exc:
        return [warn("searxng", str(exc))]
    return [pass_("searxng", f"{cfg.url} answers JSON searches")]
