"""persmem-plugin-searxng: web_search (SearXNG JSON API) and web_fetch (readable text of a page).

- `config.py`  the [searxng] section: the SearXNG URL, limits, which private networks web_fetch may reach
- `search.py`  talking to SearXNG and turning its answer into compact results
- `netguard.py` the SSRF rules: http/https only, every address resolved and checked, connections pinned to
               the checked address, every redirect checked again
- `fetch.py`   web_fetch: guarded download with size/time limits, then text extraction (trafilatura)
- `tools.py`   the MCP tools
- `plugin.py`  the pluggy hooks
"""
