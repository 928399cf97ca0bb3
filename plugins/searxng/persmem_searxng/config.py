"""[searxng] section of persmem.toml."""

from __future__ import annotations

from typing import Annotated

from msgspec import Meta

from persmem_core.sdk import ConfigSection


class SearxngConfig(ConfigSection):
    url: Annotated[
        str, Meta(description="Base URL of the SearXNG instance (its settings.yml must list `json` in search.formats), "
                              "e.g. http://127.0.0.1:8888. Unset: web_search and web_fetch are not offered at all.")
    ] = ""
    timeout: Annotated[float, Meta(gt=0, description=(
        "Seconds to wait for SearXNG; for web_fetch, the limit on the whole fetch: name lookup, connecting, "
        "every redirect and the download."))] = 15.0
    max_results: Annotated[int, Meta(ge=1, le=100, description="Most results one web_search returns.")] = 20
    fetch_max_bytes: Annotated[int, Meta(ge=1024, description=(
        "web_fetch stops downloading after this many bytes, of the decoded page and of the page as sent."))] = (
        5_000_000
    )
    fetch_allow_networks: Annotated[
        list[str],
        Meta(description="Private/loopback networks web_fetch may reach anyway, as CIDRs (e.g. \"192.168.1.0/24\" "
                         "for a LAN wiki). Empty: only public addresses."),
    ] = []
    user_agent: Annotated[str, Meta(description="The User-Agent header of web_fetch's requests.")] = (
        "persmem-web-fetch/0.1 (+https://github.com/persmem)")
