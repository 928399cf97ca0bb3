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
    transport: Literal["stdio", "http", "in-process"]  # in-process: sdk.testing.call_tool, in tests
    host: Host
    session_id: str | None = None
