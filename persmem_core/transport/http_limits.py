"""The request body limit ([server] max_body_bytes), answered so that an MCP client shows why.

The MCP SDK's limiter answers a too-large body with a bare `413 Request body too large`, which MCP clients
report as "Server returned an error response". Here the 413 carries a JSON-RPC error (MCP clients surface
those as they are) naming the limit and the setting that raises it.
"""

from __future__ import annotations

import json

from mcp.server.transport_security import RequestBodyLimitMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send


def too_large_message(limit: int) -> str:
    return (f"request body too large: the limit is {limit:,} bytes ([server] max_body_bytes). Send less "
            "(split the content, or store it in several calls), or the operator can raise [server] max_body_bytes.")


class JsonRpcBodyLimit:
    """RequestBodyLimitMiddleware whose own 413 is a JSON-RPC error naming the limit and the setting (a 413 the app
    itself answers, a plugin's own limit, passes as it is)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int):
        self.app, self.max_body_bytes = app, max_body_bytes
        self.body = json.dumps({"jsonrpc": "2.0", "id": None,
                                "error": {"code": -32600, "message": too_large_message(max_body_bytes)}}).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        reached_app = False

        async def app(scope: Scope, receive: Receive, send: Send) -> None:
            nonlocal reached_app
            reached_app = True
            await self.app(scope, receive, send)

        replacing = False

        async def explained(message: Message) -> None:
            nonlocal replacing
            if message["type"] == "http.response.start" and message["status"] == 413 and not reached_app:
                replacing = True
                await send({"type": "http.response.start", "status": 413, "headers": [
                    (b"content-type", b"application/json"), (b"content-length", str(len(self.body)).encode())]})
            elif replacing and message["type"] == "http.response.body":
                if not message.get("more_body", False):
                    await send({"type": "http.response.body", "body": self.body})
            else:
                await send(message)

        await RequestBodyLimitMiddleware(app, self.max_body_bytes)(scope, receive, explained)
