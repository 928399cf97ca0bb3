"""`persmem serve --transport stdio`: one MCP client's stdio session, served by the home's owner.

Claude Code, Codex and Claude Desktop start one stdio server per session. Any number of them share one
store: each stdio process carries its client's JSON-RPC messages, one line each, to the owner of the
home over its local socket (`persmem_core.transport.ownership`) as the agent it was started for, and writes the
answers back. When nothing owns the home, the stdio process becomes the owner itself (it starts the
plugins and listens on the socket) until its client leaves, or until `persmem serve` asks for the home
(a handover). When the owner goes away (its session ended, the HTTP server restarted), the next message
finds or becomes the new owner; a call that was running in the lost owner is answered with an error
that says it may or may not have taken effect, never silently repeated.

Both protocol eras are served, as the SDK's own stdio server serves them: the client's first request decides
the session's era. `initialize` opens a handshake-era session (MCP 2025-11-25 and earlier), whose messages go
to the owner as stateless POSTs carrying the negotiated version; a request carrying the 2026-07-28 `_meta`
envelope (`server/discover`, or any request of a client that pins the version) opens a 2026-07-28 session,
whose requests go as 2026-07-28 POSTs with the routing headers (`MCP-Protocol-Version`, `Mcp-Method`,
`Mcp-Name`) mirrored from the body, so the owner answers them on the SDK's 2026-07-28 path (stdio_eras.py).
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import sys
import threading
import time
from typing import TYPE_CHECKING

import anyio
import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from persmem_core.errors import UserError
from persmem_core.paths import socket_path
from persmem_core.transport.local_server import AGENT_HEADER, STOPPING, LocalListener, build_local_app
from persmem_core.transport.owner_card import LOCAL_BASE_URL, OWNER_PATH, OwnerCard
from persmem_core.transport.ownership import OwnerLock, answers_for_owner, bind_private_socket, check_private_home
from persmem_core.transport.stdio_eras import Refused, SessionEra

if TYPE_CHECKING:
    from persmem_core.host import Host

log = logging.getLogger("persmem.stdio")

OWNER_WAIT_SECONDS = 60.0  # how long a message waits for an owner that is starting (plugins loading)
HANDOVER_GRACE_SECONDS = 0.3  # when the owner goes, wait this long before taking the home (serve polls every 0.05 s)
LOST_CALL = ("the persmem server stopped while answering this call (it was restarted or its session ended), "
             "so the call may or may not have taken effect. Check (memory_search, amq_history...) before "
             "calling again.")


class Bridge:
    """Carries one stdio client's messages to the owner, becoming the owner when there is none."""

    def __init__(self, host: Host, agent: str):
        self.host, self.agent = host, agent
        self.lock = OwnerLock(host.home)
        self.sock_path = socket_path(host.home)
        self.session_era = SessionEra()  # the protocol era the client's first request decided
        self._owned: tuple[Host, LocalListener] | None = None
        self._had_owner = False  # an owner answered before: when it goes, another may be taking over
        self._owner_change = anyio.Lock()
        self._write = anyio.Lock()
        self._tg = None
        self.running: dict[str | int, tuple[str, anyio.CancelScope]] = {}  # requests waiting for the owner
        self.client_gone = False  # stdin ended

    # -- the session ----------------------------------------------------
    async def run(self) -> None:
        import httpx2

        transport = httpx2.AsyncHTTPTransport(uds=str(self.sock_path))
        async with httpx2.AsyncClient(transport=transport, base_url=LOCAL_BASE_URL, timeout=None) as http:
            self.http = http
            async with anyio.create_task_group() as tg:
                self._tg = tg
                with anyio.CancelScope() as session:
                    await tg.start(self._stop_on_signal, session)
                    await self.ensure_owner()
                    async with anyio.create_task_group() as calls:
                        async for line in _stdin_lines():
                            if line.strip():
                                calls.start_soon(self.forward, line)
                        # The client left: its calls still finish, but its listen streams would never end.
                        self.client_gone = True
                        for method, scope in list(self.running.values()):
                            if method == "subscriptions/listen":
                                scope.cancel()
                # The client left (or a signal came) and every answer is written: let go of the home, if ours.
                with anyio.CancelScope(shield=True):
                    await self.release_home()
                tg.cancel_scope.cancel()

    async def _stop_on_signal(self, scope: anyio.CancelScope, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                scope.cancel()
                return

    async def forward(self, line: bytes) -> None:
        try:
            message = json.loads(line)
        except ValueError:
            await self._reply({"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "parse error: "
                               "each line on stdin must be one JSON-RPC message"}})
            return
        if isinstance(message, list):
            await self._invalid(None, "a JSON array (a batch) is not supported: send one JSON-RPC message per line")
            return
        if not isinstance(message, dict):
            await self._invalid(None, "each line must be one JSON-RPC message (a JSON object)")
            return
        request_id = message.get("id")
        is_request = "id" in message
        odd_id = isinstance(request_id, bool) or not (request_id is None or isinstance(request_id, (str, int)))
        if is_request and odd_id:
            await self._invalid(None, "a request id must be a string or a number")
            return
        if "method" not in message:
            if is_request and "result" not in message and "error" not in message:
                await self._invalid(request_id, "a request needs a method")
            return  # otherwise an answer to a server request: persmem's tools make none
        if message["method"] == "notifications/cancelled" and self.cancel(message):
            return
        headers = {AGENT_HEADER: self.agent, "content-type": "application/json",
                   "accept": "application/json, text/event-stream"}
        try:
            headers |= self.session_era.headers(message, is_request)
        except Refused as refusal:
            if is_request:
                await self._reply({"jsonrpc": "2.0", "id": request_id, "error": refusal.error()})
            return
        if not is_request:
            with contextlib.suppress(UserError):
                await self._exchange(line, headers)
            return
        if self.client_gone and message["method"] == "subscriptions/listen":
            return  # nobody is left to read the stream
        with anyio.CancelScope() as scope:  # cancelled when the client cancels this request (see `cancel`)
            self.running[request_id] = (message["method"], scope)
            try:
                status, answer = await self._exchange(line, headers)
            except UserError as exc:
                lost_stream = message["method"] == "subscriptions/listen" and str(exc) == LOST_CALL
                status, answer = None, {"jsonrpc": "2.0", "error": {
                    "code": -32603, "message": STOPPING if lost_stream else str(exc)}}
            finally:
                if self.running.get(request_id, (None, scope))[1] is scope:
                    del self.running[request_id]
        if scope.cancel_called:
            return  # the client cancelled it: it expects no answer
        if message["method"] == "subscriptions/listen" and answer is None:  # the stream ended without its answer
            answer = {"jsonrpc": "2.0", "error": {"code": -32603, "message": STOPPING}}
        if answer is None or ("result" not in answer and "error" not in answer):
            answer = {"jsonrpc": "2.0", "error": {
                "code": -32603, "message": f"the persmem server answered HTTP {status} without a "
                                           "JSON-RPC answer; its log says why."}}
        answer["id"] = request_id
        if message["method"] == "initialize" and isinstance(answer.get("result"), dict):
            self.session_era.protocol_version = answer["result"].get("protocolVersion")
        await self._reply(answer)

    def cancel(self, message: dict) -> bool:
        """The client's `notifications/cancelled` for a request still running here: stop waiting for it and
        close its request to the owner (on the 2026-07-28 wire closing the response is the cancellation; a
        `subscriptions/listen` stream ends only this way). True when it named such a request."""
        params = message.get("params")
        request_id = params.get("requestId") if isinstance(params, dict) else None
        if isinstance(request_id, bool) or not isinstance(request_id, (str, int)) or request_id not in self.running:
            return False
        self.running[request_id][1].cancel()
        return True

    async def _exchange(self, body: bytes, headers: dict[str, str]) -> tuple[int, dict | None]:
        """POST one message to the owner: (HTTP status, the JSON-RPC answer in its body or None). An event stream
        (a 2026-07-28 `subscriptions/listen`) has its notifications written to the client as they come."""
        import httpx2

        for _ in range(3):
            try:
                async with self.http.stream("POST", "/mcp", content=body, headers=headers) as response:
                    if response.headers.get("content-type", "").startswith("text/event-stream"):
                        return response.status_code, await self._relay_events(response)
                    return response.status_code, _json_object(await response.aread())
            except httpx2.ConnectError:  # nobody listening: the message never left, so it is safe to send again
                with anyio.CancelScope(shield=True):  # a cancelled call must not leave a half-taken home
                    await self.ensure_owner()
            except (httpx2.RemoteProtocolError, httpx2.ReadError) as exc:
                log.warning("the owner went away during a call: %s", exc)
                raise UserError(LOST_CALL) from None
        raise UserError("could not reach the persmem server that owns this home; its log says why.")

    async def _relay_events(self, response) -> dict | None:
        """Write the notifications of a server-sent event stream to the client; return the answer that ends it."""
        answer, data = None, []
        async for text in response.aiter_lines():
            if text.startswith("data:"):
                data.append(text[5:].removeprefix(" "))
            elif not text and data:  # an event ends at a blank line; comments (": ping") carry no data
                event, data = _json_object("\n".join(data).encode()), []
                if event is not None and "method" in event:
                    await self._reply(event)
                elif event is not None:
                    answer = event
        return answer

    async def _invalid(self, request_id, why: str) -> None:
        error = {"code": -32600, "message": f"invalid request: {why}."}
        await self._reply({"jsonrpc": "2.0", "id": request_id, "error": error})

    async def _reply(self, answer: dict) -> None:
        data = json.dumps(answer, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"
        async with self._write:
            await anyio.to_thread.run_sync(_write_stdout, data)

    # -- the owner ------------------------------------------------------
    async def ensure_owner(self) -> None:
        """Return once the home's owner answers on the socket: the running one, or this process. Whatever
        answers there without holding the lock (a process that bound the path, a link, another user's socket)
        is not the owner and gets nothing."""
        async with self._owner_change:
            check_private_home(self.host.home)
            deadline = time.monotonic() + OWNER_WAIT_SECONDS
            while self._owned is None:
                if self._had_owner:  # it just went: a `persmem serve` taking over polls for the lock, let it win
                    self._had_owner = False
                    await anyio.sleep(HANDOVER_GRACE_SECONDS)
                if self.lock.acquire():  # nobody holds the home: whatever may answer on the path is not its owner
                    await self.own_home()
                    return
                if answers_for_owner(self.host.home, self.sock_path) and await self._owner_answers():
                    self._had_owner = True
                    return
                if time.monotonic() > deadline:
                    raise UserError(f"another persmem process holds {self.host.home} but does not answer on "
                                    f"{self.sock_path} after {OWNER_WAIT_SECONDS:.0f}s; its log says why.")
                await anyio.sleep(0.1)

    async def _owner_answers(self) -> bool:
        import httpx2

        try:
            return (await self.http.get(OWNER_PATH, timeout=5.0)).status_code == 200
        except httpx2.HTTPError:
            return False

    async def own_home(self) -> None:
        """Start the plugins here and serve the home on its socket (this process holds the lock)."""
        from persmem_core.host import Host
        from persmem_core.transport.tools import build_mcp_server

        host = Host(environ=self.host.environ, config_file=self.host.config_path)
        try:
            await anyio.to_thread.run_sync(host.startup)
            sock = bind_private_socket(self.sock_path)
        except BaseException:
            await anyio.to_thread.run_sync(host.shutdown)
            self.lock.release()
            raise
        app = build_local_app(host, build_mcp_server(host), OwnerCard(role="stdio"), handover=self._hand_over)
        listener = LocalListener(app, sock)
        self._owned = (host, listener)
        await self._tg.start(listener.run)
        log.info("this stdio session owns %s and serves it on %s", self.host.home, self.sock_path)

    async def _hand_over(self) -> None:
        """`persmem serve` asks for the home: let go once the handover request itself has been answered."""
        self._tg.start_soon(self.release_home)

    async def release_home(self) -> None:
        if self._owned is None:
            return
        host, listener = self._owned
        self._owned, self._had_owner = None, True
        await listener.stop()  # running calls finish first
        self.sock_path.unlink(missing_ok=True)  # still ours: the lock is held until the last line
        await anyio.to_thread.run_sync(host.shutdown)
        self.lock.release()
        log.info("this stdio session no longer owns %s", self.host.home)


async def _stdin_lines():
    """stdin's lines, read by a daemon thread: a signal can stop the session while a read is waiting (a
    worker thread of anyio's would hold the process open until the client writes again)."""
    send, receive = anyio.create_memory_object_stream[bytes](16)
    token = anyio.lowlevel.current_token()

    def read() -> None:
        try:
            for line in sys.stdin.buffer:
                anyio.from_thread.run(send.send, line, token=token)
        except Exception:  # noqa: BLE001 - the loop is gone (the session is over) or stdin broke: both end it
            pass
        finally:
            with contextlib.suppress(Exception):
                anyio.from_thread.run_sync(send.close, token=token)

    threading.Thread(target=read, name="persmem-stdin", daemon=True).start()
    async with receive:
        async for line in receive:
            yield line


def _json_object(data: bytes) -> dict | None:
    try:
        value = json.loads(data)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _write_stdout(data: bytes) -> None:
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()


def serve_stdio(host: Host, *, agent: str) -> None:
    try:
        anyio.run(Bridge(host, agent).run)
    except BaseExceptionGroup as group:  # task groups wrap what failed; a UserError is still one clear line
        errors = group.subgroup(UserError)
        while isinstance(errors, BaseExceptionGroup) and len(errors.exceptions) == 1:
            errors = errors.exceptions[0]
        if isinstance(errors, UserError):
            raise errors from None
        raise
