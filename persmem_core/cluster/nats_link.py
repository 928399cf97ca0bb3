"""The process's one connection to the NATS JetStream cluster of `[cluster] servers` (docs/scale-out.md).

nats-py is asyncio; persmem's tools run in worker threads. A `NatsLink` runs its own event loop on a daemon
thread and lets synchronous code wait for a coroutine there: `link.run(link.js.publish(...))`. Plugins get it
from `host.cluster` (None when `[cluster] servers` is empty: one box, nothing to connect to), so mail and memory
share one connection, and the host closes it after every plugin's shutdown.

nats-py is an optional dependency (`pip install 'persmem[cluster]'`): a single box never imports it.

Who may connect: the link authenticates with [cluster] nkey_file (an nkey seed) or credentials (a .creds file),
both refused unless private to this user, and speaks TLS to tls:// servers or with [cluster] tls_ca_file.
`doctor_checks` warns about servers that let anyone in or that are reached across a network without TLS.
The credentials and TLS the link connects with are made in nats_access.py; what doctor says, in nats_doctor.py.

What a frame is bound to: `StreamBinding` seals what a plugin publishes with associated data naming the stream,
the subject, the message id and whatever else decides where the frame belongs, and with the home's key refuses
any frame that is not sealed so (docs/scale-out.md, "What a frame is bound to").
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import secrets
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from persmem_core.cluster.nats_access import connect_options, refusal
from persmem_core.crypto.sealing import KeyNotOnHand, NotAuthentic, Sealer, SealingError, is_sealed
from persmem_core.errors import UserError
from persmem_core.settings import ClusterConfig

log = logging.getLogger("persmem.cluster")

# JetStream's "no suitable peers for placement": the meta leader places a replicated stream only on servers whose
# statistics it has heard, so a cluster that has just started (or has a server down) refuses for a few seconds.
NO_SUITABLE_PEERS = 10005


class ClusterUnavailable(UserError):
    """The NATS cluster did not answer in time; the text names the servers and what to check."""


class ClusterRefused(UserError):
    """The NATS servers refused this node's credentials (or lack of them); the text names the setting to fix."""


class NatsLink:
    def __init__(self, config: ClusterConfig):
        self.config = config
        self.node = config.node or socket.gethostname().split(".")[0] or "persmem"
        self.nc = None  # nats.aio.client.Client, once connected
        self.js = None  # its JetStream context
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="persmem-nats", daemon=True)
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------------------------
    def connect(self) -> NatsLink:
        """Connect (waiting up to [cluster] connect_timeout_seconds); reconnects later on its own, forever."""
        try:
            import nats  # noqa: F401 - its Client connects below
        except ImportError:
            raise UserError("[cluster] servers is set but the NATS client is not installed: "
                            "pip install 'persmem[cluster]' (nats-py).") from None
        cfg = self.config
        credentials = connect_options(cfg)  # a seed file others can read stops here, before anything runs

        refusals: list[str] = []  # what the servers said when they refused this node's first connection

        async def _errors(exc):  # nats-py prints these by default; they are logged instead
            words = refusal(exc)
            if words is not None and (self.nc is None or not self.nc.is_connected):
                refusals.append(words)
                refused.set()
            log.warning("NATS: %s: %s", type(exc).__name__, exc)

        try:
            import nkeys  # noqa: F401 - nats-py signs the server's challenge with it
        except ImportError:
            if cfg.nkey_file or cfg.credentials:
                raise UserError("[cluster] nkey_file or credentials is set but the nkeys package is not installed: "
                                "pip install 'persmem[cluster]'.") from None
        options: dict[str, Any] = dict(
            servers=list(cfg.servers), name=f"persmem-{self.node}", connect_timeout=min(cfg.connect_timeout_seconds, 5),
            allow_reconnect=True, max_reconnect_attempts=-1, reconnect_time_wait=0.25, error_cb=_errors,
            **credentials,
        )
        refused = None
        self._thread.start()

        async def _connect():
            # nats-py asks every server again and again (a cluster starting beside us may not listen yet) until one
            # takes us; a refusal of our credentials or of the TLS handshake is final: say what to fix at once.
            nonlocal refused
            from nats.aio.client import Client

            refused = asyncio.Event()
            self.nc = client = Client()
            connecting = asyncio.ensure_future(client.connect(**options))
            said = asyncio.ensure_future(refused.wait())
            await asyncio.wait({connecting, said}, timeout=cfg.connect_timeout_seconds,
                               return_when=asyncio.FIRST_COMPLETED)
            said.cancel()
            if connecting.done() and not connecting.cancelled() and connecting.exception() is None:
                return client
            connecting.cancel()
            try:
                await client.close()
            except Exception:  # noqa: BLE001 - giving up on it anyway
                pass
            self.nc = None
            if refusals:
                who = ("the nkey in " + cfg.nkey_file) if cfg.nkey_file else (
                    ("the credentials in " + cfg.credentials) if cfg.credentials else "no credentials")
                raise ClusterRefused(
                    f"the NATS cluster {', '.join(cfg.servers)} refused this node ({refusals[-1]}; it tried {who}). "
                    "Set [cluster] nkey_file to this node's seed file (`persmem cluster up` prints one per node; "
                    "`persmem cluster user NAME` makes one and the entry for the servers' authorization block), "
                    "or tls_ca_file to the CA of servers that speak TLS.")
            last = connecting.exception() if connecting.done() and not connecting.cancelled() else None
            raise ClusterUnavailable(
                f"could not connect to the NATS cluster {', '.join(cfg.servers)} within "
                f"{cfg.connect_timeout_seconds:g} s{f' ({type(last).__name__}: {last})' if last else ''}. Start it "
                "(docs/scale-out.md; `persmem cluster up` for a local trial) or fix [cluster] servers.")

        self.nc = self.run(_connect(), timeout=cfg.connect_timeout_seconds + 10)
        self.js = self.nc.jetstream(timeout=cfg.request_timeout_seconds)
        return self

    def close(self) -> None:
        """Flush and close the connection, then stop the loop. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        if self.nc is not None and not self.nc.is_closed:
            try:
                self.run(self.nc.drain(), timeout=5)
            except Exception as exc:  # noqa: BLE001 - closing: log and go on
                log.warning("NATS: closing the connection: %s", exc)
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)

    # -- running coroutines ------------------------------------------------------------------------------
    def submit(self, coro: Coroutine) -> concurrent.futures.Future:
        """Start `coro` on the link's loop; the future gives its result."""
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def run(self, coro: Coroutine, timeout: float | None = None):
        """Run `coro` on the link's loop and wait for its result (from any thread but the loop's own).
        TimeoutError after `timeout` seconds (default [cluster] request_timeout_seconds)."""
        future = self.submit(coro)
        timeout = timeout if timeout is not None else self.config.request_timeout_seconds
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise TimeoutError(f"the NATS cluster did not answer within {timeout:g} s") from None

    async def placed(self, make: Callable[[], Awaitable], what: str, replicas: int):
        """Await `make()`, a coroutine that finds or creates a replicated stream or bucket, asking again while the
        cluster is not ready for it, for up to [cluster] connect_timeout_seconds: JetStream still electing its
        leaders ("temporarily unavailable", no answer), or too few servers online to place `replicas` copies ("no
        suitable peers": servers started together with persmem are still introducing themselves). Then
        ClusterUnavailable naming `what`, the problem and the fix. Other errors are raised at once."""
        from nats.errors import NoRespondersError
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.errors import APIError, ServiceUnavailableError

        deadline = self._loop.time() + self.config.connect_timeout_seconds
        while True:
            try:
                return await make()
            except (ServiceUnavailableError, NatsTimeout, NoRespondersError) as exc:
                problem = f"JetStream did not answer ({type(exc).__name__})"
                fix = ("Check that every NATS server runs with JetStream enabled and that they reach each other "
                       "(`persmem cluster status`).")
            except APIError as exc:
                if exc.err_code != NO_SUITABLE_PEERS:
                    raise
                problem = f"fewer JetStream servers are online than its {replicas} replica(s) ({exc.description})"
                fix = "Start the missing servers (`persmem cluster status` lists them) or lower [cluster] replicas."
            if self._loop.time() >= deadline:
                raise ClusterUnavailable(
                    f"the NATS cluster {', '.join(self.config.servers)} could not place {what} within "
                    f"{self.config.connect_timeout_seconds:g} s: {problem}. {fix}") from None
            await asyncio.sleep(0.25)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        return self._loop


# -- what a frame is bound to ---------------------------------------------------------------------------------------

def bound_purpose(kind: bytes, *parts: str | int) -> bytes:
    """The associated data of a frame bound to its place: `kind` (what stream it belongs to) and each part
    length-prefixed, so no two different places give the same bytes."""
    out = [kind]
    for part in parts:
        data = str(part).encode()
        out.append(len(data).to_bytes(4, "big") + data)
    return b"".join(out)


class FrameRefused(Exception):
    """A frame on NATS that does not count: not sealed while encryption is on, or sealed for another place (copied to
    another subject, message id or position: moved, replayed or forged). Logged and passed over, never applied or
    delivered. Its text says which and what to check."""


class StreamBinding:
    """Sealed frames of one JetStream stream bound to where they belong.

    `seal(body, subject, msg_id, *place)` seals with associated data naming the stream's `kind`, the subject, the
    message id and the `place` parts the plugin says decide where the frame belongs (a mail's name; a memory write's
    place in its collection's order), so a frame published anywhere else does not open. `open(seq, data, subject,
    msg_id, *place)` gives the body back or raises FrameRefused: with the home's key (encryption on), a frame that is
    not sealed is refused, and so is one that does not open as sealed for that place. A frame sealed under a key
    this node does not have raises KeyNotOnHand (a node with another key must say so, not skip quietly).

    Frames stored before frames were bound (by an earlier persmem) are read as before, but only those: the first
    frame on `marker_subject` that opens (a sealed, bound marker that the first node of this version publishes,
    `establish`) is where binding starts; nobody without the key can make one, and every node finds the same first
    one, so every node refuses the same frames. Without encryption there is no key to seal with: frames are plain
    and only the NATS servers' authorization keeps strangers out (doctor warns)."""

    def __init__(self, link: NatsLink, sealer: Sealer, stream: str, kind: bytes, marker_subject: str,
                 legacy_purpose: bytes | None):
        """`legacy_purpose`: what frames from before binding were sealed as (None: they hold the body as is)."""
        self.link, self.sealer, self.stream, self.kind = link, sealer, stream, kind
        self.marker_subject, self.legacy_purpose = marker_subject, legacy_purpose
        self.bound_from = 0  # the stream sequence binding starts at (the first marker's); 0: every frame is bound

    @property
    def on(self) -> bool:
        """Whether frames are sealed and bound (the home has a key: [encryption] enabled)."""
        return self.sealer.enabled

    def seal(self, body: bytes, subject: str, msg_id: str, *place: str | int) -> bytes:
        return self.sealer.seal(body, bound_purpose(self.kind, subject, msg_id, *place)) if self.on else body

    def open(self, seq: int, data: bytes, subject: str, msg_id: str, *place: str | int) -> bytes:
        if not self.on:  # no key here: plaintext as it comes; a sealed frame is left to fail where it is read
            return self.sealer.open(data, self.legacy_purpose) if self.legacy_purpose is not None else data
        if seq < self.bound_from:  # stored before binding began (or bound already, if a marker was purged since)
            if is_sealed(data):
                try:
                    return self.sealer.open(data, bound_purpose(self.kind, subject, msg_id, *place))
                except NotAuthentic:
                    pass
            return self.sealer.open(data, self.legacy_purpose) if self.legacy_purpose is not None else data
        if not is_sealed(data):
            raise FrameRefused(f"{self.stream} sequence {seq} on {subject} is not sealed, and with encryption on every "
                               "frame must be: refused (only a client without the cluster's key publishes such a "
                               "frame; check who can reach the NATS servers: `persmem doctor`)")
        try:
            return self.sealer.open(data, bound_purpose(self.kind, subject, msg_id, *place))
        except KeyNotOnHand:
            raise
        except SealingError:
            raise FrameRefused(f"{self.stream} sequence {seq} on {subject} (message id {msg_id[:80]!r}) does not open "
                               "as sealed for that place: it was copied there from elsewhere (moved or replayed) or "
                               "forged, and is refused (check who can reach the NATS servers: `persmem doctor`)"
                               ) from None

    async def establish(self, details: Callable[[], Awaitable[dict]] | None = None) -> dict:
        """Find where binding starts (the first marker that opens), publishing a marker first when there is none;
        returns that marker's `details` (what its publisher said, e.g. where another bucket's binding starts).
        Runs on the link's loop. Without a key: nothing to bind, returns {}."""
        if not self.on:
            return {}
        found = await self._first_marker()
        if found is None:
            said = await details() if details is not None else {}
            msg_id = f"binding-{secrets.token_hex(8)}"
            data = self.seal(json.dumps(said).encode(), self.marker_subject, msg_id)
            await self._publish_marker(data, msg_id)
            found = await self._first_marker()
            if found is None:
                raise ClusterUnavailable(f"the marker just published to {self.stream} can not be read back; "
                                         "`persmem cluster status` shows the cluster.")
        self.bound_from, said = found
        if self.bound_from > 1:
            log.info("%s: frames from sequence %d on are sealed and bound to their place; the %d before it were "
                     "written by an earlier persmem and are read as before", self.stream, self.bound_from,
                     self.bound_from - 1)
        return said

    async def _first_marker(self) -> tuple[int, dict] | None:
        from nats.js.errors import NotFoundError

        seq = 1
        while True:
            try:
                msg = await self.link.js.get_msg(self.stream, seq=seq, subject=self.marker_subject, next=True)
            except NotFoundError:
                return None
            msg_id = (msg.headers or {}).get("Nats-Msg-Id", "")
            try:
                body = self.open(msg.seq, msg.data or b"", self.marker_subject, msg_id) if is_sealed(msg.data or b"") \
                    else None
                if body is not None:
                    return msg.seq, json.loads(body)
            except (FrameRefused, SealingError, ValueError) as exc:
                log.warning("%s: a binding marker at sequence %d does not open (%s); passed over", self.stream,
                            msg.seq, exc)
            seq = msg.seq + 1

    async def _publish_marker(self, data: bytes, msg_id: str) -> None:
        from nats.errors import NoRespondersError
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.errors import NoStreamResponseError, ServiceUnavailableError

        deadline = self.link.loop.time() + self.link.config.connect_timeout_seconds
        while True:
            try:
                await self.link.js.publish(self.marker_subject, data, stream=self.stream, timeout=2,
                                           headers={"Nats-Msg-Id": msg_id})
                return
            except (NatsTimeout, NoRespondersError, NoStreamResponseError, ServiceUnavailableError) as exc:
                if self.link.loop.time() >= deadline:
                    raise ClusterUnavailable(f"the NATS cluster did not store the binding marker of {self.stream} "
                                             f"({type(exc).__name__}); `persmem cluster status` shows it.") from None
                await asyncio.sleep(0.25)
