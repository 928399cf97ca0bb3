"""Who an HTTP request speaks for, as the auth middleware leaves it in the ASGI scope: read by the MCP tools (their
caller) and by routes mounted with auth="agent" (`agent_of_scope`, in the SDK)."""

from __future__ import annotations

AGENT_SCOPE_KEY = "persmem.agent"  # set by the HTTP auth middleware on every authenticated request
TRANSPORT_SCOPE_KEY = "persmem.transport"  # "stdio" for calls a stdio session forwards over the local socket


def agent_of_scope(scope) -> str | None:
    """The authenticated agent of an ASGI request (routes mounted with auth="agent" always have one)."""
    return scope.get(AGENT_SCOPE_KEY)


def transport_of_scope(scope) -> str:
    """How the caller reached the server: "stdio" (through the owner's local socket) or "http"."""
    return scope.get(TRANSPORT_SCOPE_KEY, "http")
