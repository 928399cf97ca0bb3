"""The mail backend on NATS JetStream (amq_maildir's `amq_backend` contract: opaque message bytes). The stream and
the bucket it uses, their names and keys, are storage.py's.

- Deliveries: stream `PERSMEM_AMQ`, subjects `persmem.amq.<mailbox>`, file storage, replicas [cluster] replicas.
  Each delivery is one message with headers `Nats-Msg-Id: <mailbox>/<name>` (JetStream stores a retried publish
  once, within the duplicate window) and `Persmem-Name: <name>`. It is acknowledged only when JetStream's PubAck
  says it is stored: with replicas 3, on a quorum of NATS servers. A publish that times out or finds no stream
  leader (a NATS server failing over) is retried with the same id within [cluster] request_timeout_seconds.
- Claims: KV bucket `persmem_amq_claims` (same replicas), one key per message (`<mailbox>/<name>` with its dots
  as `=`); the first `create` wins the claim for its reader, every other gets "wrong last sequence": False. A
  create whose answer was lost is looked up by the token it wrote, so a retry never turns a win into a loss.
- The view (view.py): an ordered consumer on `persmem.amq.>` from the start and a watch on the claims bucket,
  both on the link's event loop, keep this node's view current; listings are answered from it, and its
  `generation` moves on every change (other nodes' too), which wakes the live feed. Opening waits until the view
  has caught up with the stream and the bucket. A node sees its own delivery and claim at once.
- Message bytes are not kept in the view: `fetch` reads them by sequence (direct get, any replica; from the
  stream leader when a replica lags), after a small cache of the newest ones (`CACHE_BYTES`). amq_maildir parses
  each message once and keeps the parsed message, as it does with Maildir files.
- Bound to their place (persmem_core.sdk.StreamBinding; docs/scale-out.md): with the home's key, a delivery
  is the message bytes sealed again with associated data naming its subject (the mailbox), its message id and its
  name, and a claim's value is sealed for its key. A delivery copied into another mailbox or under another name,
  or one not sealed at all, does not open: it is logged and left out of the view, never listed or read. A claim
  that does not open is left out too, and a reader finding one in the way replaces it. Deliveries and claims
  stored by an earlier persmem (before the stream's first binding marker, `persmem.amq._binding`) read as before.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import json
import logging
import re
import secrets
import threading
import time

import nats.errors
import nats.js.errors

from persmem_core.sdk import FrameRefused, KeyNotOnHand, NatsLink, Sealer, SealingError, StreamBinding

from .storage import (BOX_RE, CLAIMS, MARKER, PREFIX, STREAM, SUBJECTS, claim_key, ensure_claims, ensure_stream,
                      parse_claim_key)
from .view import MailView

log = logging.getLogger("persmem.amq")

NAME_HEADER = "Persmem-Name"
ATTEMPT_SECONDS = 2.0  # one publish or claim attempt; retried until [cluster] request_timeout_seconds
CACHE_BYTES = 8 << 20  # newest message bytes kept on hand for fetch
FETCH_BATCH = 128  # direct gets in flight at once
HEARTBEAT_SECONDS = 1.0  # the view's consumer notices a lost NATS server within two of these

NAME_RE = re.compile(r"\w[\w.-]{0,199}\.md", re.ASCII)


class JetStreamMail:
    """The backend. `open(link, replicas)` makes the stream and the bucket if they are missing, starts the view
    and waits until it has caught up."""

    def __init__(self, link: NatsLink, replicas: int, sealer: Sealer | None = None):
        self.link = link
        self.replicas = replicas
        sealer = sealer or Sealer.plain()
        self.binding = StreamBinding(link, sealer, STREAM, b"persmem.amq.delivery", MARKER, None)
        self.claim_binding = StreamBinding(link, sealer, f"KV_{CLAIMS}", b"persmem.amq.claim", "", None)
        self.timeout = link.config.request_timeout_seconds
        self.view = MailView()
        self._kv = None
        self._sub = None
        self._watcher = None
        self._watch_task = None
        self._claims_ready: asyncio.Event | None = None
        self._cache: collections.OrderedDict[int, bytes] = collections.OrderedDict()
        self._cache_bytes = 0
        self._cache_lock = threading.Lock()
        self._closed = False

    @classmethod
    def open(cls, link: NatsLink, replicas: int, sealer: Sealer | None = None) -> JetStreamMail:
        """`sealer`: the home's (host.sealer), which deliveries and claims are sealed and bound with."""
        mail = cls(link, replicas, sealer)
        wait = max(link.config.connect_timeout_seconds, link.config.request_timeout_seconds) + 60
        link.run(mail._start(), timeout=wait)
        return mail

    # -- the contract ----------------------------------------------------------------------------------
    @property
    def generation(self) -> int:
        return self.view.generation

    def describe(self) -> str:
        return f"NATS JetStream stream {STREAM} ({', '.join(self.link.config.servers)}, replicas {self.replicas})"

    def mailboxes(self) -> list[str]:
        return self.view.mailboxes()

    def names(self, box: str, folder: str) -> list[str]:
        return self.view.names(box, folder)

    def folder_of(self, box: str, name: str) -> str | None:
        return self.view.folder_of(box, name)

    def unread_count(self, box: str) -> int:
        return self.view.unread_count(box)

    def deliver(self, box: str, name: str, data: bytes) -> None:
        if not BOX_RE.fullmatch(box) or not NAME_RE.fullmatch(name):
            raise ValueError(f"not a mailbox and message name: {box!r}, {name!r}")
        if self.view.seq(box, name) is not None:
            raise FileExistsError(errno.EEXIST, f"{box} already holds a message called {name}")
        self.link.run(self._publish(box, name, data), timeout=self.timeout + ATTEMPT_SECONDS + 1)

    def claim(self, box: str, name: str) -> bool:
        if self.view.folder_of(box, name) != "new":
            return False
        return self.link.run(self._claim(box, name), timeout=self.timeout + ATTEMPT_SECONDS + 1)

    def fetch(self, box: str, names: list[str]) -> dict[str, bytes]:
        seqs = {name: seq for name in names if (seq := self.view.seq(box, name)) is not None}
        out, missing = {}, []
        with self._cache_lock:
            for name, seq in seqs.items():
                data = self._cache.get(seq)
                if data is None:
                    missing.append((name, seq))
                else:
                    out[name] = data
        if missing:
            wait = self.timeout * (1 + len(missing) // FETCH_BATCH) + 5
            out |= self.link.run(self._get_many(box, missing), timeout=wait)
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.link.nc is None or self.link.nc.is_closed:
            return
        try:
            self.link.run(self._stop(), timeout=5)
        except Exception as exc:  # noqa: BLE001 - closing: log and go on
            log.warning("amq: stopping the JetStream view: %s", exc)

    # -- what runs on the link's loop ------------------------------------------------------------------
    async def _start(self) -> None:
        js = self.link.js
        # A cluster started together with this server may not be ready for a while: placed() asks again.
        info = await self.link.placed(lambda: ensure_stream(js, self.replicas), f"the mail stream {STREAM}",
                                      self.replicas)
        self._kv = await self.link.placed(lambda: ensure_claims(js, self.replicas), f"the claims bucket {CLAIMS}",
                                          self.replicas)

        async def claims_next() -> dict:  # claims from here on are sealed too: said in the marker
            return {"claims_from": (await js.stream_info(f"KV_{CLAIMS}")).state.last_seq + 1}

        said = await self.binding.establish(claims_next)
        self.claim_binding.bound_from = int(said.get("claims_from", 0))
        if self.binding.bound_from:  # the marker may have been published just now
            info = await js.stream_info(STREAM)
        target = info.state.last_seq
        caught_up = asyncio.Event()
        if target == 0 or info.state.messages == 0:  # nothing to read (a purged stream keeps its last sequence)
            caught_up.set()

        async def on_message(msg):
            self._apply(msg)
            if self.view.last_seq >= target or msg.metadata.num_pending == 0:
                caught_up.set()

        self._claims_ready = asyncio.Event()
        self._watcher = await self._kv.watchall()
        self._watch_task = asyncio.get_running_loop().create_task(self._watch())
        self._sub = await js.subscribe(SUBJECTS, stream=STREAM, ordered_consumer=True, cb=on_message,
                                       idle_heartbeat=HEARTBEAT_SECONDS)
        await caught_up.wait()
        await self._claims_ready.wait()

    def _apply(self, msg) -> None:
        seq = msg.metadata.sequence.stream
        if msg.subject == MARKER:
            self.view.passed(seq)
            return
        box = msg.subject[len(PREFIX):]
        headers = msg.headers or {}
        name = headers.get(NAME_HEADER, "")
        if not BOX_RE.fullmatch(box) or not NAME_RE.fullmatch(name):
            log.warning("amq: stream %s sequence %d is not a persmem delivery (subject %s); left out", STREAM,
                        seq, msg.subject)
            self.view.passed(seq)
            return
        try:
            data = self.binding.open(seq, msg.data or b"", msg.subject, headers.get("Nats-Msg-Id", ""), name)
        except FrameRefused as exc:
            log.error("amq: a delivery to %s called %s was refused, not delivered: %s", box, name[:80], exc)
            self.view.passed(seq)
            return
        except KeyNotOnHand as exc:
            if self.binding.on:  # a node with another key, or a forgery naming one: nothing this node can check
                log.error("amq: the delivery at %s sequence %d is sealed under a key this node does not have, so it "
                          "is left out (%s)", STREAM, seq, exc)
                self.view.passed(seq)
                return
            data = msg.data  # no key here at all: listed, and reading it says which key it needs
        self._remember(seq, data)
        self.view.add(box, name, seq)

    async def _watch(self) -> None:
        while True:
            try:
                entry = await self._watcher.updates(timeout=3600)
            except asyncio.CancelledError:
                return
            except Exception:  # noqa: BLE001 - a quiet hour (nats TimeoutError): keep watching
                continue
            if entry is None:  # the marker after the bucket's initial contents
                self._claims_ready.set()
                continue
            if entry.__class__.__name__ == "StopIterSentinel":
                return
            if entry.operation is None and (found := parse_claim_key(entry.key)) and self._genuine(entry):
                self.view.claim(*found)

    def _genuine(self, entry) -> bool:
        """Whether a claims-bucket entry is a node's claim (sealed for its key, with the key on), else logged."""
        try:
            self.claim_binding.open(entry.revision, entry.value or b"", entry.key, "")
            return True
        except (FrameRefused, SealingError) as exc:
            log.error("amq: the claim %s (revision %d) is not a persmem node's and is left out: %s", entry.key,
                      entry.revision, exc)
            return False

    async def _stop(self) -> None:
        if self._watch_task is not None:
            self._watch_task.cancel()
        for stop in (self._sub and self._sub.unsubscribe, self._watcher and self._watcher.stop):
            if stop is not None:
                try:
                    await stop()
                except Exception as exc:  # noqa: BLE001 - closing
                    log.debug("amq: %s", exc)

    async def _publish(self, box: str, name: str, data: bytes) -> None:
        headers = {"Nats-Msg-Id": f"{box}/{name}", NAME_HEADER: name}
        frame = self.binding.seal(data, PREFIX + box, headers["Nats-Msg-Id"], name)
        deadline = time.monotonic() + self.timeout
        attempt = 0
        while True:
            try:
                ack = await self.link.js.publish(PREFIX + box, frame, timeout=_left(deadline), stream=STREAM,
                                                 headers=dict(headers))
                break
            except RETRY as exc:
                attempt += 1
                if time.monotonic() >= deadline:
                    raise TimeoutError(errno.ETIMEDOUT, f"the NATS cluster did not acknowledge the delivery within "
                                       f"{self.timeout:g} s ([cluster] request_timeout_seconds; last: "
                                       f"{type(exc).__name__})") from None
                await asyncio.sleep(0.1 if attempt < 5 else 0.25)
            except nats.js.errors.APIError as exc:
                raise OSError(errno.EIO, f"JetStream refused the delivery: {exc.description or exc}") from None
        if ack.duplicate and attempt == 0:  # the id was taken by someone else's delivery, not a retry of ours
            raise FileExistsError(errno.EEXIST, f"{box} already holds a message called {name}")
        self._remember(ack.seq, data)
        self.view.add(box, name, ack.seq)  # visible on this node at once

    async def _claim(self, box: str, name: str) -> bool:
        key = claim_key(box, name)
        token = json.dumps({"node": self.link.node, "at": time.time(), "token": secrets.token_hex(8)}).encode()
        token = self.claim_binding.seal(token, key, "")
        deadline = time.monotonic() + self.timeout
        tried = False
        replace = None  # the revision of a claim in the way that no node made
        while True:
            try:
                if replace is None:
                    await asyncio.wait_for(self._kv.create(key, token), _left(deadline))
                else:
                    await asyncio.wait_for(self._kv.update(key, token, last=replace), _left(deadline))
                self.view.claim(box, name)
                return True
            except nats.js.errors.KeyWrongLastSequenceError:
                entry = await asyncio.wait_for(self._kv.get(key), _left(deadline))
                if tried and entry.value == token:  # an earlier attempt won and lost its answer: the token says so
                    self.view.claim(box, name)
                    return True
                if self.claim_binding.on and not self._genuine(entry):
                    if entry.revision == replace:  # unchanged: the update's answer was lost, ask again
                        continue
                    replace = entry.revision  # a forged claim: take its place
                    continue
                self.view.claim(box, name)  # someone else's: read
                return False
            except RETRY as exc:
                tried = True
                if time.monotonic() >= deadline:
                    raise TimeoutError(errno.ETIMEDOUT, f"the NATS cluster did not answer the claim within "
                                       f"{self.timeout:g} s (last: {type(exc).__name__})") from None
                await asyncio.sleep(0.1)

    async def _get_many(self, box: str, wanted: list[tuple[str, int]]) -> dict[str, bytes]:
        out = {}
        for start in range(0, len(wanted), FETCH_BATCH):
            batch = wanted[start:start + FETCH_BATCH]
            got = await asyncio.gather(*(self._get(box, name, seq) for name, seq in batch))
            out |= {name: data for (name, _), data in zip(batch, got, strict=True) if data is not None}
        return out

    async def _get(self, box: str, name: str, seq: int) -> bytes | None:
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                try:
                    msg = await self.link.js.get_msg(STREAM, seq, direct=True)
                except nats.js.errors.NotFoundError:  # a replica that has not got it yet: ask the leader
                    msg = await self.link.js.get_msg(STREAM, seq)
                data = self.binding.open(seq, msg.data or b"", PREFIX + box, f"{box}/{name}", name)
                self._remember(seq, data)
                return data
            except FrameRefused as exc:  # the view holds only what opened: this is a changed stream
                log.error("amq: %s sequence %d, read as %s/%s, was refused: %s", STREAM, seq, box, name, exc)
                return None
            except nats.js.errors.NotFoundError:
                log.warning("amq: stream %s has no message %d any more", STREAM, seq)
                return None
            except RETRY:
                if time.monotonic() >= deadline:
                    raise TimeoutError(errno.ETIMEDOUT, f"the NATS cluster did not return message {seq} of "
                                       f"{STREAM} within {self.timeout:g} s") from None
                await asyncio.sleep(0.1)

    def _remember(self, seq: int, data: bytes) -> None:
        if len(data) > CACHE_BYTES // 8:
            return
        with self._cache_lock:
            if seq in self._cache:
                return
            self._cache[seq] = data
            self._cache_bytes += len(data)
            while self._cache_bytes > CACHE_BYTES:
                _, old = self._cache.popitem(last=False)
                self._cache_bytes -= len(old)


# The errors of a NATS server failing over (a timeout, no stream leader yet, a reconnect): tried again.
RETRY = (asyncio.TimeoutError, nats.errors.TimeoutError, nats.errors.NoRespondersError,
         nats.js.errors.NoStreamResponseError, nats.js.errors.ServiceUnavailableError, nats.js.errors.ServerError,
         nats.errors.ConnectionReconnectingError, nats.errors.OutboundBufferLimitError)


def _left(deadline: float) -> float:
    return max(0.2, min(ATTEMPT_SECONDS, deadline - time.monotonic()))
