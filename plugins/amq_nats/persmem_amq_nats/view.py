"""This node's view of the mail in JetStream: for each mailbox, its message names with their stream sequence,
and which of them are claimed (read). No NATS here: jetstream.py feeds it from the stream and the claims bucket,
and answers listings from it.

Memory: a name and a sequence per message (about 200 bytes with the dicts' overhead: 20 MB for 100,000
messages); message bytes are not kept here. Thread-safe: the link's event loop writes, worker threads read.
"""

from __future__ import annotations

import threading


class MailView:
    def __init__(self):
        self._boxes: dict[str, dict[str, int]] = {}  # box -> name -> stream sequence (the first one, if twice)
        self._claimed: dict[str, set[str]] = {}  # box -> names claimed (a claim may arrive before its message)
        self._unread: dict[str, int] = {}
        self._lock = threading.Lock()
        self.generation = 0  # bumped on every change applied
        self.last_seq = 0  # the highest stream sequence applied

    # -- applying (the link's loop, and a node's own deliveries and claims) --------------------------------
    def add(self, box: str, name: str, seq: int) -> bool:
        """A delivered message; False when the view had it already (a redelivery, or our own delivery seen)."""
        with self._lock:
            self.last_seq = max(self.last_seq, seq)
            names = self._boxes.setdefault(box, {})
            known = names.get(name)
            if known is not None:
                if seq < known:  # the same name stored twice (two migrations at once): the first one counts
                    names[name] = seq
                return False
            names[name] = seq
            if name not in self._claimed.get(box, ()):
                self._unread[box] = self._unread.get(box, 0) + 1
            self.generation += 1
            return True

    def passed(self, seq: int) -> None:
        """A stream message that is not a delivery (a marker, or one refused): read past, nothing listed."""
        with self._lock:
            self.last_seq = max(self.last_seq, seq)

    def claim(self, box: str, name: str) -> bool:
        """A claim; False when the view had it already."""
        with self._lock:
            claimed = self._claimed.setdefault(box, set())
            if name in claimed:
                return False
            claimed.add(name)
            if name in self._boxes.get(box, ()):
                self._unread[box] -= 1
            self.generation += 1
            return True

    # -- reading ---------------------------------------------------------------------------------------
    def mailboxes(self) -> list[str]:
        with self._lock:
            return sorted(box for box, names in self._boxes.items() if names)

    def names(self, box: str, folder: str) -> list[str]:
        read = folder == "cur"
        with self._lock:
            claimed = self._claimed.get(box, set())
            return sorted(name for name in self._boxes.get(box, ()) if (name in claimed) == read)

    def folder_of(self, box: str, name: str) -> str | None:
        with self._lock:
            if name not in self._boxes.get(box, ()):
                return None
            return "cur" if name in self._claimed.get(box, ()) else "new"

    def seq(self, box: str, name: str) -> int | None:
        with self._lock:
            return self._boxes.get(box, {}).get(name)

    def unread_count(self, box: str) -> int:
        with self._lock:
            return self._unread.get(box, 0)

    def size(self) -> tuple[int, int]:
        """(messages, claimed) in the view."""
        with self._lock:
            return sum(map(len, self._boxes.values())), sum(map(len, self._claimed.values()))
