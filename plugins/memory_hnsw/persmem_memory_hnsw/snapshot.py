"""The memory store as its record logs hold it, read without the owner lock: what `persmem memory stats` and
`persmem memory export` show, also while a server owns the store.

Safe next to a running server for the reason backups are (backup.py): the log is append-only and every frame is
checksummed, so the intact frames read at one moment are a consistent state, and a frame being appended is
left out until it is whole. A compaction replaces the file atomically: an open file is the old or the new log,
each whole. No vector index is built and no model loaded: the logs hold everything these commands show.
Sealed frames are opened with the home's Sealer (`host.sealer`); one that does not open raises SealingError.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import msgspec

from persmem_core.sdk import Sealer

from .store.log import LOG_NAME, decode_frame, read_frames
from .store.records import Head, Memory, Put, head_of, summarize
from .store.replay import MODEL_RECORD
from .service import collection_folders

class CollectionSnapshot:
    """One collection's live memories as its log held them when read."""

    def __init__(self, folder: Path, sealer: Sealer):
        self.name, self.folder, self._sealer = folder.name, folder, sealer
        path = self._path = folder / LOG_NAME
        self._data = path.read_bytes() if path.exists() else b""
        self._spans: dict[str, tuple[int, int]] = {}  # live memory id -> its latest frame
        self._heads: dict[str, Head] = {}
        strings: dict[str, str] = {}
        self.log_bytes = 0  # up to the last intact frame
        for offset, end, entry in read_frames(self._data, sealer, path):
            if isinstance(entry, Put):
                self._spans[entry.memory.id] = (offset, end)
                self._heads[entry.memory.id] = head_of(entry.memory, strings)
            else:
                self._spans.pop(entry.id, None)
                self._heads.pop(entry.id, None)
            self.log_bytes = end

    def __len__(self) -> int:
        return len(self._spans)

    def memories(self) -> Iterator[Memory]:
        """The live memories, oldest first, each read from the log when its turn comes."""
        for head in sorted(self._heads.values(), key=lambda m: m.created):
            start, end = self._spans[head.id]
            yield decode_frame(self._data[start:end], self._sealer, self._path).memory

    def stats(self) -> dict:
        counts = summarize(self._heads.values())
        model = self.folder / MODEL_RECORD
        model_id = msgspec.json.decode(model.read_bytes()).get("model_id") if model.exists() else None
        return {"collection": self.name, **counts, "log_bytes": self.log_bytes, "embedding_model": model_id}


def read_store(folder: Path, sealer: Sealer) -> dict[str, CollectionSnapshot]:
    """Every collection of the memory folder, by name (`sealer`: the home's, host.sealer)."""
    return {path.name: CollectionSnapshot(path, sealer) for path in collection_folders(folder)}
