"""Dashboard login sessions: Litestar's server-side sessions (a random id in an HttpOnly cookie, the data in a
FileStore under <home>/dashboard/sessions), with the rules Litestar's backend lacks:

- Nothing is stored for a visitor who has not logged in. Litestar stores the session of every request, empty or
  not, under the id of the visitor's cookie (or a new one): every anonymous request wrote a file, and an id
  handed out, or planted, before login became the logged-in session (fixation).
- A session is written only when its data changes, that is at login, and always under a new id: the id the
  browser came with is deleted. A login lasts `max_age` from the moment it happened.
- A session emptied by the app (logout, or a revoked agent seen by `agent_of`) is deleted from the store, and the
  browser's cookie removed; so is any cookie naming no stored session (expired, forged).
- Expired sessions are swept on the first request and then every few minutes (sessions are written only at
  login, so this bounds the folder to the logins of one `max_age`).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

from litestar.datastructures import Cookie, MutableScopeHeaders
from litestar.middleware.session.server_side import ServerSideSessionBackend, ServerSideSessionConfig
from litestar.types import Empty
from litestar.utils.dataclass import extract_dataclass_items

log = logging.getLogger("persmem.dashboard")

SWEEP_SECONDS = 600.0
_AS_LOADED = "persmem.dashboard.session_as_loaded"  # scope key: the session as this request found it


class LoginSessionBackend(ServerSideSessionBackend):
    """Litestar's server-side backend with the rules of this module's docstring."""

    def __init__(self, config: LoginSessionConfig) -> None:
        super().__init__(config)
        self._next_sweep = 0.0

    async def load_from_connection(self, connection) -> dict[str, Any]:
        store = self.config.get_store_from_app(connection.scope["app"])
        await self._sweep_now_and_then(store)
        data = await super().load_from_connection(connection)
        connection.scope[_AS_LOADED] = dict(data)
        return data

    async def store_in_message(self, scope_session, message, connection) -> None:
        store = self.config.get_store_from_app(connection.scope["app"])
        sent_id = connection.cookies.get(self.config.key)
        sent_id = None if sent_id in (None, "", "null") else sent_id
        before = connection.scope.get(_AS_LOADED) or {}
        after = {} if scope_session is Empty or not scope_session else dict(scope_session)
        headers = MutableScopeHeaders.from_message(message)
        if after and after != before:  # a login: a new id, never the one the browser brought
            if sent_id:
                await self.delete(sent_id, store)
            session_id = self.generate_session_id()
            await self.set(session_id, self.serialize_data(after, connection.scope), store)
            headers.add("Set-Cookie", self._cookie(session_id, self.config.max_age))
        elif not after and sent_id:  # logged out, revoked, expired or never a session: forget it everywhere
            await self.delete(sent_id, store)
            headers.add("Set-Cookie", self._cookie("", 0))

    def _cookie(self, value: str, max_age: int) -> str:
        params = dict(extract_dataclass_items(self.config, exclude_none=True, include=Cookie.__dict__.keys()))
        return Cookie(**{**params, "key": self.config.key, "value": value, "max_age": max_age}).to_header(header="")

    async def _sweep_now_and_then(self, store) -> None:
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + min(SWEEP_SECONDS, self.config.max_age)
        try:
            await store.delete_expired()
        except Exception:  # noqa: BLE001 - a file being written or damaged must not fail the request
            log.warning("dashboard: sweeping expired sessions failed; the next sweep tries again", exc_info=True)


@dataclass
class LoginSessionConfig(ServerSideSessionConfig):
    _backend_class = LoginSessionBackend


async def is_stored(config: LoginSessionConfig, connection) -> bool:
    """Whether the session `connection` came with is still stored (not logged out, expired or deleted)."""
    session_id = connection.cookies.get(config.key)
    if not session_id:
        return False
    return await config.get_store_from_app(connection.scope["app"]).get(session_id) is not None


async def delete_stored(config: LoginSessionConfig, connection) -> None:
    """Delete the session `connection` came with (its agent was revoked: adding it again must not revive it)."""
    if session_id := connection.cookies.get(config.key):
        await config.get_store_from_app(connection.scope["app"]).delete(session_id)
