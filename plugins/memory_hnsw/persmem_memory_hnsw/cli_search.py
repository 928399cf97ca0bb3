"""`persmem memory search QUERY`: memory_search from a shell, as an agent sees it.

It goes through the home's owner, the one way into a store: a running server (or a stdio session) answers on
the home's local socket; where none does, the command owns the home for its length (as `persmem sessions
import` and `persmem dashboard` do) and asks its own socket. So the answer is exactly the tool's (the same
ranking, score floor and permissions), for the agent named (default: [server] default_agent).
"""

from __future__ import annotations

import json
from typing import Any

SNIPPET_CHARS = 160
PROTOCOL = "2025-06-18"


def search(host, arguments: dict[str, Any], agent: str | None) -> dict:
    """memory_search's reply for `arguments`, as `agent`, through the home's owner (this process, if none)."""
    from persmem_core.sdk import OwnerCard, holding_home, owner_card, socket_path

    if owner_card(host) is not None:
        return _call(socket_path(host.home), arguments, agent)
    with holding_home(host, OwnerCard(role="memory search")) as open_socket:
        host.startup()
        try:
            open_socket()
            return _call(socket_path(host.home), arguments, agent)
        finally:
            host.shutdown()


def _call(socket, arguments: dict[str, Any], agent: str | None) -> dict:
    """One stateless MCP tools/call over the local socket (JSON answer)."""
    import httpx2

    from persmem_core.sdk import UserError

    headers = {"content-type": "application/json", "accept": "application/json, text/event-stream",
               "mcp-protocol-version": PROTOCOL} | ({"x-persmem-agent": agent} if agent else {})
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "memory_search", "arguments": arguments}}
    with httpx2.Client(transport=httpx2.HTTPTransport(uds=str(socket)), base_url="http://persmem.local",
                       timeout=120) as http:
        response = http.post("/mcp", json=request, headers=headers)
    try:
        answer = response.json()
    except ValueError:
        raise UserError(f"the server answered {response.status_code} without JSON; its log says why") from None
    if "error" in answer:
        raise UserError(str(answer["error"].get("message", answer["error"])))
    result = answer.get("result", {})
    text = "".join(part.get("text", "") for part in result.get("content", []) if part.get("type") == "text")
    if result.get("isError"):
        raise UserError(text or "memory_search failed")
    return result.get("structuredContent") or json.loads(text)


def lines(reply: dict) -> list[str]:
    """A hit a line: id, score, project and type, the start of its text on one line; then the reply's note."""
    out = []
    for hit in reply.get("results", []):
        snippet = " ".join(str(hit.get("content", "")).split())
        if len(snippet) > SNIPPET_CHARS:
            snippet = snippet[: SNIPPET_CHARS - 1] + "…"
        where = "/".join(str(hit[key]) for key in ("project", "type") if hit.get(key))
        out.append(f"{hit.get('id')}  {float(hit.get('score', 0.0)):.3f}  {where}  {snippet}")
    if not out:
        out.append("No memories matched.")
    if reply.get("note"):
        out.append(f"note: {reply['note']}")
    return out
