"""Security headers on every HTTP response the server sends, error pages included.

persmem answers JSON and event streams, never pages of its own, so the defaults
forbid everything a browser could do with a response: sniff it into HTML or
script, frame it, send its URL as a referrer, or keep it in a cache (answers
carry memories and mail). A route that sets one of these headers itself (the
dashboard sends its own Content-Security-Policy) keeps its own value.
"""

from __future__ import annotations

from http import HTTPStatus

from starlette.types import ASGIApp, Message, Receive, Scope, Send

SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'"),
    (b"cache-control", b"no-store"),
)


def with_security_headers(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """`headers` plus each security header it does not set itself."""
    present = {name.lower() for name, _ in headers}
    return list(headers) + [(name, value) for name, value in SECURITY_HEADERS if name not in present]


def plain_response(status: int, text: str) -> bytes:
    """A whole HTTP/1.1 response that closes the connection, for answers written below the ASGI app
    (a request that timed out or could not be parsed)."""
    body = text.encode()
    headers = with_security_headers([
        (b"content-type", b"text/plain; charset=utf-8"),
        (b"content-length", str(len(body)).encode()),
        (b"connection", b"close"),
    ])
    head = f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n".encode()
    return head + b"".join(name + b": " + value + b"\r\n" for name, value in headers) + b"\r\n" + body


class SecurityHeadersMiddleware:
    """Adds the security headers to every HTTP response of `app` that does not set them."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": with_security_headers(list(message.get("headers", [])))}
            await send(message)

        await self.app(scope, receive, send_with_headers)
