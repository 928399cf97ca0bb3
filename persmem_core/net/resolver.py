"""Name resolution for the server's outgoing fetches (net/guard.py) that a hung DNS server cannot pile up.

socket.getaddrinfo has no timeout and cannot be interrupted, so it runs in a thread the caller stops
waiting for at its deadline. Those threads are daemon threads (a hung lookup never delays the server's
exit) and at most MAX_HUNG_LOOKUPS exist at once per Resolver (each kind of fetch holds one per server): while
that many are still waiting, no new lookup starts, instead of a thread leaking per call."""

from __future__ import annotations

import socket
import threading

import anyio
import anyio.from_thread
import anyio.lowlevel

from persmem_core import UserError

MAX_HUNG_LOOKUPS = 8

AddrInfo = tuple  # one getaddrinfo entry: (family, type, proto, canonname, sockaddr)


class Resolver:
    """getaddrinfo in bounded daemon threads: at most `max_hung` lookups wait on the DNS server at once."""

    def __init__(self, max_hung: int = MAX_HUNG_LOOKUPS):
        self.max_hung = max_hung
        self._slots = threading.BoundedSemaphore(max_hung)

    async def getaddrinfo(self, host: str, port: int) -> list[AddrInfo]:
        """getaddrinfo(host, port) for TCP; cancellable (the caller's deadline applies), errors as socket.gaierror."""
        try:  # a numeric host (127.1, 2130706433, ::1) is parsed here and now, without asking any DNS server
            return socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST)
        except socket.gaierror:
            pass
        if not self._slots.acquire(blocking=False):
            raise UserError(f"{self.max_hung} name lookups are still waiting for this server's DNS resolver, which "
                            "does not answer; no more start until they end. Try again in a minute; if it "
                            "lasts, the operator should check the server's DNS (/etc/resolv.conf).")
        token = anyio.lowlevel.current_token()
        finished = anyio.Event()
        outcome: dict = {}

        def lookup() -> None:
            try:
                outcome["infos"] = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
            except BaseException as exc:  # noqa: BLE001 - handed to the waiting call, which re-raises it
                outcome["error"] = exc
            finally:
                self._slots.release()
                try:
                    anyio.from_thread.run_sync(finished.set, token=token)
                except Exception:  # noqa: BLE001 - the event loop has ended (server shutting down): nobody waits
                    pass

        threading.Thread(target=lookup, name="persmem name lookup", daemon=True).start()
        await finished.wait()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["infos"]
