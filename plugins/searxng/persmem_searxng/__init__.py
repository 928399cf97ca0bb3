"""persmem-plugin-searxng: web_search (SearXNG JSON API) and web_fetch (readable text of a page).

- `plugin.py`   the pluggy hooks (only hooks): config, tools, startup/shutdown, doctor
- `config.py`   the [searxng] section: the SearXNG URL, limits, which private networks web_fetch may reach
- `service.py`  what the tools use, built at startup from the config and kept in `host.state`
- `tools.py`    the MCP tools
- `search.py`   talking to SearXNG and turning its answer into compact results
- `fetch.py`    web_fetch: guarded download under one deadline and size limits, then text extraction
- `netguard.py` the SSRF rules: http/https only, every address resolved and checked (IPv6 forms that embed
                an IPv4 address judged by it), connections pinned to the checked address, redirects checked
- `resolver.py` name lookups that a hung DNS server cannot pile up (bounded daemon threads)
"""
