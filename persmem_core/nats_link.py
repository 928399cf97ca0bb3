"""The process's one connection to the NATS JetStream cluster of `[cluster] servers` (docs/scale-out.md).

nats-py is asyncio; persmem's tools run in worker threads. A `NatsLink` runs its own event loop on a daemon
thread and lets synchronous code wait for a coroutine there: `link.run(link.js.publish(...))`. Plugins get it
from `host.cluster` (None when `[cluster] servers` is empty: one box, nothing to connect to), so mail and memory
share one connection, and the host closes it after every plugin's shutdown.

nats-py is an optional dependency (`pip install 'persmem[cluster]'`): a single box never imports it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from persmem_core.errors import UserError
from persmem_core.settings import ClusterConfig

log = logging.getLogger("persmem.cluster")

# JetStream's "no suitable peers for placement": the meta leader places a replicated stream only on servers whose
# statistics it has heard, so a cluster that has just started (or has a server down) refuses for a few seconds.
NO_SUITABLE_PEERS = 10005


class ClusterUnavailable(UserError):
    """The NATS cluster did not answer in time; the text names the servers and what to check."""


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
            import nats
        except ImportError:
            raise UserError("[cluster] servers is set but the NATS client is not installed: "
                            "pip install 'persmem[cluster]' (nats-py).") from None
        self._thread.start()
        cfg = self.config

        async def _errors(exc):  # nats-py prints these by default; they are logged instead, once per kind
            log.warning("NATS: %s: %s", type(exc).__name__, exc)

        options: dict[str, Any] = dict(
            servers=list(cfg.servers), name=f"persmem-{self.node}", connect_timeout=min(cfg.connect_timeout_seconds, 5),
            allow_reconnect=True, max_reconnect_attempts=-1, reconnect_time_wait=0.25, error_cb=_errors,
        )
        if cfg.credentials:
            options["user_credentials"] = cfg.credentials

        async def _connect():
            deadline = self._loop.time() + cfg.connect_timeout_seconds
            while True:  # a cluster starting beside us may not listen yet
                try:
                    return await nats.connect(**options)
                except Exception as exc:  # noqa: BLE001 - nats-py raises several kinds; all mean "not yet"
                    if self._loop.time() >= deadline:
                        raise ClusterUnavailable(
                            f"could not connect to the NATS cluster {', '.join(cfg.servers)} within "
                            f"{cfg.connect_timeout_seconds:g} s ({type(exc).__name__}: {exc}). Start it "
                            "(docs/scale-out.md; "
                            "`persmem cluster up` for a local trial) or fix [cluster] servers.") from None
                    await asyncio.sleep(0.25)

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


def stream_problems(info, replicas: int) -> list[str]:
    """What doctor warns about in a JetStream stream's info (nats-py's StreamInfo): another number of replicas than
    [cluster] `replicas`, and replicas that are offline or behind."""
    name = info.config.name
    problems = []
    if info.config.num_replicas != replicas:
        problems.append(f"stream {name} keeps {info.config.num_replicas} replica(s), [cluster] replicas says "
                        f"{replicas}")
    for peer in (info.cluster.replicas or []) if info.cluster else []:
        if peer.offline or not peer.current:
            problems.append(f"replica {peer.name} is {'offline' if peer.offline else 'behind'}")
    return problems
