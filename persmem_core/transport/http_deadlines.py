"""Read deadlines for HTTP requests, so slow clients cannot hold connections forever (slowloris).

uvicorn closes a connection that stays idle between requests (`timeout_keep_alive`), but it waits
forever for a connection that never starts a request, for request headers that never end, and for
a body that stops midway. This adds those deadlines to uvicorn's own HTTP protocol (httptools or
h11, whichever uvicorn picked), as a subclass passed to `uvicorn.Config(http=...)`:

- headers: from a connection's opening, or from the first byte of a request, its headers must be
  complete within `header_timeout_seconds` (dribbling a byte at a time does not extend it);
- body: no pause longer than `body_idle_timeout_seconds` while the body arrives, and the whole body
  within `body_timeout_seconds`.

A request past its deadline gets 408 when no answer has started, and its connection is closed; the
app sees the client disconnect. Time in which the server itself is the one not reading (a response
still being computed before a pipelined request, uvicorn's back-pressure on a large body) is not
counted against the client. Only the per-connection protocol state that uvicorn's httptools and h11
implementations share is used: `cycle` (the current request) with `more_body`, `response_started`,
`response_complete`, `disconnected` and `message_event`, and `flow.read_paused`.
"""

from __future__ import annotations

import asyncio

from persmem_core.transport.http_headers import plain_response

BAD_REQUEST = "Invalid HTTP request received."


def with_read_deadlines(base: type[asyncio.Protocol], *, header: float, body_idle: float, body: float) -> type:
    """A subclass of uvicorn's HTTP protocol class `base` that enforces the three deadlines (seconds)."""
    timed_out = plain_response(
        408,
        f"request timed out: its headers must arrive within {header:g} s, its body without a pause over "
        f"{body_idle:g} s and within {body:g} s ([server] header_timeout_seconds, body_idle_timeout_seconds, "
        "body_timeout_seconds). Send the request at once.",
    )
    return type(
        f"ReadDeadlines{base.__name__}",
        (ReadDeadlines, base),
        {"header_seconds": header, "body_idle_seconds": body_idle, "body_seconds": body, "timed_out": timed_out},
    )


class ReadDeadlines:
    """Mixin over a uvicorn HTTP protocol; `with_read_deadlines` sets the class attributes."""

    header_seconds: float
    body_idle_seconds: float
    body_seconds: float
    timed_out: bytes

    def connection_made(self, transport: asyncio.Transport) -> None:
        super().connection_made(transport)
        self._request_seen = None  # the last request whose headers were complete (its uvicorn cycle)
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._arm("header", self.header_seconds)  # a connection that never starts a request is closed too

    def data_received(self, data: bytes) -> None:
        before = self.cycle
        was_body = self._receiving_body(before)
        super().data_received(data)
        # Bytes that were neither body of the current request nor completed new headers begin a request.
        self._after_read(begins_request=not was_body and self.cycle is before)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel("header", "body_idle", "body")
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        # uvicorn's own answer to a request it cannot parse, with the security headers every answer carries.
        self.transport.write(plain_response(400, BAD_REQUEST))
        self.transport.close()

    # -- bookkeeping after each read -----------------------------------
    def _after_read(self, begins_request: bool) -> None:
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            self._cancel("header", "body_idle", "body")  # closed, or handed over to a WebSocket protocol
            return
        cycle = self.cycle
        if cycle is not self._request_seen:  # a request's headers are complete
            self._request_seen = cycle
            self._cancel("header", "body")
            if self._receiving_body(cycle):
                self._arm("body", self.body_seconds)
        if self._receiving_body(cycle):
            self._cancel("body_idle")
            self._arm("body_idle", self.body_idle_seconds)  # any byte of body restarts the pause
        else:
            self._cancel("body_idle", "body")
            if begins_request:  # its headers' clock runs from here
                self._arm("header", self.header_seconds)

    @staticmethod
    def _receiving_body(cycle) -> bool:
        return cycle is not None and cycle.more_body and not cycle.response_complete and not cycle.disconnected

    # -- timers ----------------------------------------------------------
    def _arm(self, name: str, seconds: float) -> None:
        if name not in self._timers:
            self._timers[name] = self.loop.call_later(seconds, self._deadline_passed, name)

    def _cancel(self, *names: str) -> None:
        for name in names:
            timer = self._timers.pop(name, None)
            if timer is not None:
                timer.cancel()

    def _deadline_passed(self, name: str) -> None:
        del self._timers[name]
        if self.transport.is_closing() or self.transport.get_protocol() is not self:
            return
        cycle = self.cycle
        if cycle is not self._request_seen:  # headers completed without a read of ours (h11 pipelining)
            self._after_read(begins_request=False)
            return
        if name == "header":
            if cycle is not None and not cycle.response_complete:
                self._arm("header", self.header_seconds)  # the server is still answering the previous request
                return
            self._time_out(None)
        elif self._receiving_body(cycle):
            if self.flow.read_paused:
                self._arm(name, self.body_idle_seconds)  # uvicorn stopped reading (back-pressure), not the client
                return
            self._time_out(cycle)

    def _time_out(self, cycle) -> None:
        if cycle is None or not cycle.response_started:
            self.transport.write(self.timed_out)
        if cycle is not None:
            cycle.disconnected = True  # the app's receive() answers http.disconnect and its sends are dropped
            cycle.message_event.set()
        self.transport.close()
