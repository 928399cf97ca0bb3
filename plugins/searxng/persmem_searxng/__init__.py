"""persmem-plugin-searxng: web_search (SearXNG JSON API) and web_fetch (readable text of a page).

- `plugin.py`   the pluggy hooks (only hooks): config, tools, startup/shutdown, doctor
- `config.py`   the [searxng] section: the SearXNG URL, limits, which private networks web_fetch may reach
- `service.py`  what the tools use, built at startup from the config and kept in `host.state`
- `tools.py`    the MCP tools
- `search.py`   talking to SearXNG and turning its answer into compact results
- `fetch.py`    web_fetch: guarded download under one deadline and size limits, then text extraction; the SSRF
                rules (every address resolved and checked, connections pinned to it, each redirect checked
                again) are the core's `persmem_core.sdk.Guard`, shared with OAuth's metadata-document fetch
"""
