"""`persmem serve` (or `persmem dashboard`) taking a home: at once when nobody owns it, from a stdio session by
handover, and never from another server (a mistake the operator hears about in one line, naming the running one).
"""

from __future__ import annotations

import contextlib
import threading
from typing import TYPE_CHECKING

from persmem_core.errors import UserError
from persmem_core.paths import socket_path
from persmem_core.transport.owner_card import HANDOVER_PATH, LOCAL_BASE_URL, OWNER_PATH, OwnerCard, read_card
from persmem_core.transport.ownership import OwnerLock, answers_for_owner, bind_private_socket, check_private_home

if TYPE_CHECKING:
    from persmem_core.host import Host

HANDOVER_SECONDS = 30.0  # a stdio owner finishes its running calls and stops its plugins within this
ATTEMPTS = 3  # a stdio session may take the home again between the handover and our lock


def take_home(host: Host, lock: OwnerLock) -> None:
    """Hold `lock` on return, or raise a UserError that names the process serving the home."""
    check_private_home(host.home)
    for _ in range(ATTEMPTS):
        if lock.acquire():
            return
        card = owner_card(host)
        if card is None:  # starting or stopping: give it a moment
            if lock.wait(5.0):
                return
            raise UserError(f"another persmem process holds {host.home} ({lock.path}) but does not answer on "
                            f"{socket_path(host.home)}. Wait for it to finish starting or stopping, or stop it.")
        if card.role != "stdio":
            what = "persmem serve" if card.role == "http" else f"persmem {card.role}"
            mcp = f", MCP at {card.mcp_url}" if card.mcp_url else ""
            raise UserError(
                f"`{what}` is already serving {host.home} (pid {card.pid}{mcp}, running since {card.started}). "
                f"Use that one (every client can connect to it), or stop it first "
                f"(`kill {card.pid}`, or `systemctl --user stop persmem` if it runs as a service).")
        _request_handover(host)
        if lock.wait(HANDOVER_SECONDS):
            return
    raise UserError(f"could not take {host.home} from the stdio sessions using it; try again, or close them.")


def owner_card(host: Host) -> OwnerCard | None:
    """The owner's card, from the owner only (the lock holder's own socket), else None."""
    import httpx2

    if not answers_for_owner(host.home, socket_path(host.home)):
        return None

    try:
        with _owner_client(host, timeout=5.0) as http:
            response = http.get(OWNER_PATH)
    except httpx2.HTTPError:
        return None
    return read_card(response.content) if response.status_code == 200 else None


def _owner_client(host: Host, timeout: float):
    """An HTTP client of the home's local socket (the stdio bridge's is its async twin)."""
    import httpx2

    return httpx2.Client(transport=httpx2.HTTPTransport(uds=str(socket_path(host.home))),
                         base_url=LOCAL_BASE_URL, timeout=timeout)


def _request_handover(host: Host) -> None:
    import httpx2

    try:
        with _owner_client(host, timeout=HANDOVER_SECONDS) as http:
            http.post(HANDOVER_PATH)
    except httpx2.HTTPError:
        pass  # it went away by itself: the lock tells


@contextlib.contextmanager
def holding_home(host: Host, card: OwnerCard):
    """For the block, this process owns the home, for a command that opens the plugins' stores without serving
    MCP over TCP (`persmem dashboard`): the lock (taken from a stdio session if need be), and the local socket
    served from a thread of its own, so stdio sessions started meanwhile join this process instead of failing.
    Yields `open_socket()`: call it once the plugins have started."""
    import anyio

    from persmem_core.transport.local_server import LocalListener, build_local_app
    from persmem_core.transport.tools import build_mcp_server

    lock = OwnerLock(host.home)
    take_home(host, lock)
    listener, thread = None, None
    try:
        def open_socket() -> None:
            nonlocal listener, thread
            sock = bind_private_socket(socket_path(host.home))
            listener = LocalListener(build_local_app(host, build_mcp_server(host), card), sock)
            thread = threading.Thread(target=anyio.run, args=(listener.run,), name="persmem-local", daemon=True)
            thread.start()

        yield open_socket
    finally:
        if listener is not None:
            listener.server.should_exit = True  # uvicorn looks at it every tick; running calls finish first
            thread.join(timeout=10)
            socket_path(host.home).unlink(missing_ok=True)
        lock.release()
