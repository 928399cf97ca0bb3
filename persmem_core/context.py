"""What a tool call knows about who called it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from persmem_core.host import Host


@dataclass(frozen=True)
class CallContext:
    """Passed to any tool parameter annotated `CallContext` (it is not part of
    the tool's MCP schema, so a prompt cannot set it).

    `agent` is the authenticated caller: the bearer token's or secret path's
    agent over HTTP, `--agent`/`PERSMEM_AGENT` over stdio. Record "who" from
    here, never from a tool argument."""

    agent: str
    transport: Literal["stdio", "http", "in-process"]  # in-process: Host.call_tool, in a plugin's tests
    host: Host
    session_id: str | None = None


AGENT_SCOPE_KEY = "persmem.agent"  # set by the HTTP auth middleware on every authenticated request
TRANSPORT_SCOPE_KEY = "persmem.transport"  # "stdio" for calls a stdio session forwards over the local socket


def agent_of_scope(scope) -> str | None:
    """The authenticated agent of an ASGI request (routes mounted with auth="agent" always have one)."""
    return scope.get(AGENT_SCOPE_KEY)


def transport_of_scope(scope) -> str:
    """How the caller reached the server: "stdio" (through the owner's local socket) or "http"."""
    return scope.get(TRANSPORT_SCOPE_KEY, "http")
