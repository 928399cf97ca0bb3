"""How often each memory was retrieved: statistics a search weighs, kept in memory and saved with the index.

Retrieval counts are statistics, not records: a crash loses those since the last save (usage.msgpack, sealed with
the home's key when encryption is on). id -> (retrievals by searches of other agents than its author: what ranking
weighs, last retrieved at, retrievals by all searches: what memory_get shows). An author's own searches never
raise its memory's rank.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path

import msgspec

from persmem_core.sdk import Sealer, SealingError, atomic_write_bytes

log = logging.getLogger("persmem.memory")

USAGE_NAME = "usage.msgpack"  # the saved counts, beside the index
USAGE_PURPOSE = b"memory.usage"  # what the retrieval counts are sealed as


class RetrievalCounts:
    """One collection's retrieval counts. Searches count under the collection's read lock, side by side: the
    counts have a lock of their own."""

    def __init__(self, name: str, folder: Path, sealer: Sealer):
        self.name, self.path, self.sealer = name, Path(folder) / USAGE_NAME, sealer
        self.counts: dict[str, tuple[int, float, int]] = {}
        self.changed = False
        self._lock = threading.Lock()

    def record(self, ids: list[str], heads: dict, *, by: str | None = None) -> None:
        """Count one retrieval of each of `ids` (the results a search by `by` returned). A memory `by` wrote
        is counted, but not toward its rank: an agent searching its own memories again and again must not
        lift them above the others'."""
        now = time.time()
        with self._lock:
            for memory_id in ids:
                head = heads.get(memory_id)
                ranked, _, count = self.counts.get(memory_id, (0, 0.0, 0))
                own = by is not None and head is not None and head.author == by
                self.counts[memory_id] = (ranked + (not own), now, count + 1)
            self.changed = self.changed or bool(ids)

    def of(self, memory_id: str) -> tuple[int, float]:
        """(retrievals, last retrieved at); (0, 0.0) for a memory never returned by a search."""
        _, last, count = self.counts.get(memory_id, (0, 0.0, 0))
        return count, last

    def save(self, live: dict) -> None:
        """Write the counts of the memories still `live` (ids), sealed."""
        with self._lock:
            kept = {k: list(v) for k, v in self.counts.items() if k in live}
            self.changed = False
        if kept or self.path.exists():
            atomic_write_bytes(self.path, self.sealer.seal(msgspec.msgpack.encode(kept), USAGE_PURPOSE))

    def load(self, live: dict) -> None:
        """Read the saved counts of the memories still `live`; unreadable ones start again from zero, but a file
        sealed with another key is an error (the next save would write over them)."""
        self.counts = self._read(live)

    def _read(self, live: dict) -> dict[str, tuple[int, float, int]]:
        path = self.path
        try:
            stored = path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:  # statistics: start again
            log.warning("collection %s: retrieval counts in %s unreadable (%s); counting from zero", self.name, path, exc)
            return {}
        try:
            opened = self.sealer.open(stored, USAGE_PURPOSE)
        except SealingError as exc:  # not "counting from zero": the next save would write over them
            raise SealingError(f"{path}: {exc}") from None
        try:
            saved = msgspec.msgpack.decode(opened, type=dict[str, list[float]])
            # (count, last) before own searches were told apart: all of them count toward the rank
            saved = {k: (int(v[0]), float(v[1]), int(v[2] if len(v) > 2 else v[0])) for k, v in saved.items()}
        except (msgspec.DecodeError, msgspec.ValidationError, IndexError) as exc:  # statistics: start again
            log.warning("collection %s: retrieval counts in %s unreadable (%s); counting from zero", self.name,
                        path, exc)
            return {}
        return {k: v for k, v in saved.items() if k in live}
