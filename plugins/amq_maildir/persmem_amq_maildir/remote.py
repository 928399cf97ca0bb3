"""A mailbox kept by a mail backend (the `amq_backend` hook, hookspecs.py) instead of a Maildir folder: the same
methods MailStore, the feed and the commands use of a maildir.Mailbox, over the backend's opaque bytes.

A backend's messages never change once delivered and are only moved from unread to read, so each is fetched and
parsed once and then served from the cache (as Mailbox does with files). A backend has no quarantine folder and
no tmp/: bytes that are not a message (which no persmem writes) are left out of listings and logged once; a
sealed message whose key is not on hand is a SealingError naming the message and the fix, as on a Maildir.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from persmem_core.sdk import Sealer, SealingError, is_sealed

from .maildir import PURPOSE, Entry, Quarantined
from .message import MalformedMessage, Message, decode

log = logging.getLogger("persmem.amq")


class RemoteBox:
    """The inbox of one agent in `backend`. `sealer` gives the Sealer that opens sealed messages (asked only when
    one is met); None: a sealed message can not be opened."""

    quarantine_dir = None  # nothing is ever moved aside in a backend

    def __init__(self, backend, name: str, max_file_bytes: int, sealer: Callable[[], Sealer] | None = None):
        self.backend = backend
        self.name = name
        self.max_file_bytes = max_file_bytes
        self._sealer = sealer
        self._cache: dict[str, Message] = {}
        self._skipped: set[str] = set()  # names whose bytes are not a message (logged once)
        self._lock = threading.Lock()

    # -- what a Mailbox answers ------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.name in self.backend.mailboxes()

    def deliver(self, name: str, data: bytes) -> None:
        """Durable when it returns; FileExistsError when the name is taken, OSError when the backend failed."""
        self.backend.deliver(self.name, name, data)

    def names(self, folder: str) -> list[str]:
        return self.backend.names(self.name, folder)

    def unread_count(self) -> int:
        return self.backend.unread_count(self.name)

    def claim(self, name: str) -> bool:
        return self.backend.claim(self.name, name)

    def get(self, name: str) -> Entry | None:
        """The message called `name`, read or unread, or None."""
        folder = self.backend.folder_of(self.name, name)
        if folder is None:
            return None
        message = self._messages([name]).get(name)
        return Entry(name, folder, message) if message is not None else None

    def scan(self, folders=("new", "cur")) -> tuple[list[Entry], list[Quarantined]]:
        """Every message in `folders` (nothing is ever quarantined: the second list stays empty)."""
        listed = [(name, folder) for folder in folders for name in self.backend.names(self.name, folder)]
        messages = self._messages([name for name, _ in listed])
        return [Entry(name, folder, messages[name]) for name, folder in listed if name in messages], []

    def quarantined(self) -> list[str]:
        return []

    def tmp_count(self) -> int:
        return 0

    def clean_tmp(self, max_age_seconds: float) -> int:
        return 0

    # -- parsing ---------------------------------------------------------------------------------------
    def _messages(self, names: list[str]) -> dict[str, Message]:
        with self._lock:
            found = {n: self._cache[n] for n in names if n in self._cache}
            missing = [n for n in names if n not in found and n not in self._skipped]
        if not missing:
            return found
        fetched = self.backend.fetch(self.name, missing)
        parsed = {}
        for name, data in fetched.items():
            message = self._parse(name, data)
            if message is not None:
                parsed[name] = message
        with self._lock:
            self._cache.update(parsed)
        return found | parsed

    def _parse(self, name: str, data: bytes) -> Message | None:
        try:
            if len(data) > self.max_file_bytes:
                raise MalformedMessage(f"{len(data)} bytes, over [amq] max_file_bytes = {self.max_file_bytes}")
            return decode(self._open(name, data) if is_sealed(data) else data)
        except MalformedMessage as exc:
            with self._lock:
                self._skipped.add(name)
            log.warning("amq: %s in mailbox %s (%s) is not a message, left out of listings: %s", name, self.name,
                        self.backend.describe(), exc)
            return None

    def _open(self, name: str, data: bytes) -> bytes:
        sealer = self._sealer() if self._sealer is not None else Sealer.plain()
        try:
            return sealer.open(data, PURPOSE)
        except SealingError as exc:
            raise SealingError(f"the sealed message {name} in {self.name}'s mailbox ({self.backend.describe()}): "
                               f"{exc}") from exc
