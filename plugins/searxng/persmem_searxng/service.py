"""The searxng plugin's service: what web_search and web_fetch need, built at startup from [searxng] and kept
in `host.state` until shutdown: the SearXNG URL and limits, the networks web_fetch may reach, and the bounded
name lookups (a hung DNS server holds at most a few threads of this server, however many calls are made).

- `open_service(host)` builds it (the `startup` hook puts it in `host.state`).
- `service(host)` is how the tools get it: before startup, or after shutdown, that is `NotReady`.
"""

from __future__ import annotations

from persmem_core.sdk import Guard, Resolver, networks_from

from . import fetch as fetching
from .config import SearxngConfig
from .search import search

NAME = "searxng"  # the plugin's entry-point name: its key in host.state
ALLOW_SETTING = "[searxng] fetch_allow_networks"  # the private networks web_fetch may reach


class WebAccess:
    def __init__(self, config: SearxngConfig):
        self.config = config
        self.guard = Guard(networks_from(config.fetch_allow_networks, ALLOW_SETTING), Resolver(), what="web_fetch",
                           allow_hint=f"an operator can allow a network with {ALLOW_SETTING}")
        self.limits = fetching.Limits(timeout=config.timeout, max_bytes=config.fetch_max_bytes,
                                      user_agent=config.user_agent)

    def search(self, query: str, max_results: int, categories: str, language: str, time_range: str) -> dict:
        """At most [searxng] max_results results, whatever the caller asks for."""
        return search(self.config.url, query, min(max_results, self.config.max_results), categories, language,
                      time_range, self.config.timeout)

    async def fetch(self, url: str, max_chars: int, extract: bool) -> dict:
        return await fetching.fetch(url, max_chars, extract, self.guard, self.limits)


def open_service(host) -> WebAccess:
    return WebAccess(host.section("searxng"))


def service(host) -> WebAccess:
    return host.state.get(NAME)
