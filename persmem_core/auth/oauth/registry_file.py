"""`<home>/oauth.json` on disk, under the store (store.py): read through a cache with its token indexes, changed in
one locked read-modify-write, written atomically after dropping what can never be used again.

The file is changed under a lock (flock on `.oauth.lock`, so the CLI and a running server never interleave, plus a
threading lock for the server's threads), written atomically (a write that returned survives kill -9), and re-read
when its (inode, mtime, size) changes, so a revocation by another process takes effect at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import msgspec

from persmem_core.auth.oauth.records import OAuthFile
from persmem_core.errors import UserError
from persmem_core.fileio import atomic_write_bytes
from persmem_core.invocation import persmem_line

DAY = 86400.0
ENDED_GRANTS_KEPT_DAYS = 30  # a grant whose refresh lapsed this long ago is dropped (listed as expired until then)
UNUSED_CLIENT_DAYS = 1  # a registered client that never got a grant is dropped after this (registration is open)


def iso_epoch(value: str) -> float:
    try:
        return datetime.fromisoformat(value).timestamp()
    except (TypeError, ValueError):
        return 0.0



class RegistryFile:
    """oauth.json and its cache: `_snapshot()` to read, `with self._locked() as data: ...; self._save(data)` to
    change it. `_by_access` and `_by_refresh` index the cached grants by their tokens' hashes."""

    def __init__(self, home: Path):
        self.path = Path(home) / "oauth.json"
        self._lock_path = Path(home) / ".oauth.lock"
        self._mutex = threading.Lock()
        self._cache = OAuthFile()
        self._cache_key: tuple[int, int, int] | None = None
        self._by_access: dict[str, tuple[str, float]] = {}  # sha256 -> (grant_id, expires), live grants only
        self._by_refresh: dict[str, tuple[str, bool]] = {}  # sha256 -> (grant_id, spent?), every grant

    # -- reading -------------------------------------------------------
    def _decode(self, data: bytes) -> OAuthFile:
        try:
            return msgspec.json.decode(data, type=OAuthFile)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise UserError(
                f"{self.path}: the OAuth registry is damaged ({exc}). Restore it from a backup, or move it away: "
                "remote clients then sign in again (each asks the operator for consent once more) and "
                f"`{persmem_line('oauth', 'password')}` sets the operator passphrase again."
            ) from None

    def _stat_key(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        # every write is a new inode (atomic rename): two same-size writes within one clock tick still differ
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _load(self) -> OAuthFile:
        """The cached file, re-read if it changed on disk. Call with the mutex held."""
        key = self._stat_key()
        if key is None:
            if self._cache_key is not None or self._cache.grants or self._cache.clients:
                self._set_cache(OAuthFile(), None)
            return self._cache
        if key != self._cache_key:
            self._set_cache(self._decode(self.path.read_bytes()), key)
        return self._cache

    def _set_cache(self, data: OAuthFile, key: tuple[int, int, int] | None) -> None:
        self._cache, self._cache_key = data, key
        by_access: dict[str, tuple[str, float]] = {}
        by_refresh: dict[str, tuple[str, bool]] = {}
        for grant in data.grants.values():
            for spent in grant.spent_refresh:
                by_refresh[spent] = (grant.grant_id, True)
            if grant.refresh_sha256:
                by_refresh[grant.refresh_sha256] = (grant.grant_id, False)
            if grant.revoked is None:
                for access in grant.access:
                    by_access[access.token_sha256] = (grant.grant_id, access.expires)
        self._by_access, self._by_refresh = by_access, by_refresh

    def _snapshot(self) -> OAuthFile:
        with self._mutex:
            return self._load()

    # -- changing ------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[OAuthFile]:
        """A fresh copy of the file (another process may have written it) for one read-modify-write; the caller
        saves it with `_save` before leaving, or changes nothing."""
        self._lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with self._mutex:
                    # decoded anew, never the cached object: readers may hold records from it
                    yield self._decode(self.path.read_bytes()) if self.path.exists() else OAuthFile()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _save(self, data: OAuthFile) -> None:
        """Prune, write atomically, and make the written content the cache. Call inside `_locked`."""
        self._prune(data, time.time())
        atomic_write_bytes(self.path, msgspec.json.format(msgspec.json.encode(data), indent=2) + b"\n")
        self._set_cache(data, self._stat_key())

    @staticmethod
    def _prune(data: OAuthFile, now: float) -> None:
        """Drop what can never be used again. Used codes stay until they would have expired, so a replay is
        recognised; ended grants stay listed for a while, so `persmem oauth clients` shows what happened."""
        data.codes = {h: c for h, c in data.codes.items() if c.expires > now}
        kept_grants = {}
        for grant_id, grant in data.grants.items():
            if grant.refresh_expires + ENDED_GRANTS_KEPT_DAYS * DAY < now:
                continue
            grant.access = [a for a in grant.access if a.expires > now]
            kept_grants[grant_id] = grant
        data.grants = kept_grants
        granted = {grant.client_id for grant in data.grants.values()}
        data.clients = {
            cid: c for cid, c in data.clients.items()
            if cid in granted or iso_epoch(c.registered) + UNUSED_CLIENT_DAYS * DAY > now
        }
        data.operator.approval_codes = [a for a in data.operator.approval_codes if a.expires > now]

