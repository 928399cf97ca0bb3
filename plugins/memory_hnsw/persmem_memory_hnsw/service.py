"""All collections of one persmem home, the embedder they share, and the session bootstrap.

One process owns the memory folder at a time (an exclusive lock file), so
two servers never write the same log; share one server over HTTP instead.
"""

from __future__ import annotations

import fcntl
import os
import re
import threading
from pathlib import Path

from persmem_core import UserError

from .collection import Collection
from .config import MemoryConfig

COLLECTION_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")


class MemoryService:
    def __init__(self, folder: Path, config: MemoryConfig, embedder):
        self.folder, self.config, self.embedder = Path(folder), config, embedder
        self._collections: dict[str, Collection] = {}
        self._open_lock = threading.Lock()
        self._lock_file = None

    def start(self) -> MemoryService:
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.folder / ".owner.lock", "a+")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            self._lock_file = None
            raise UserError(
                f"{self.folder} is in use by another persmem process. Stop it, or connect to that server over "
                "HTTP instead of starting a second one (two processes must never write one memory store)."
            ) from None
        self._lock_file.truncate(0)
        self._lock_file.write(str(os.getpid()))
        self._lock_file.flush()
        self.embedder.load()
        for path in sorted(self.folder.iterdir()):
            if path.is_dir() and COLLECTION_RE.match(path.name):
                self.collection(path.name)
        return self

    def stop(self) -> None:
        for collection in self._collections.values():
            collection.close()
        self._collections.clear()
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    def collection(self, name: str, *, create: bool = True) -> Collection:
        if not isinstance(name, str) or not COLLECTION_RE.match(name):
            raise UserError(f"invalid collection name {name!r}: 1-64 lowercase letters, digits, '_' or '-'.")
        existing = self._collections.get(name)
        if existing is not None:
            return existing
        if not create:
            raise UserError(f"no collection {name!r}; memory_list_collections shows them.")
        with self._open_lock:
            if name not in self._collections:
                self._collections[name] = Collection(name, self.folder / name, self.embedder, self.config).open()
        return self._collections[name]

    def collections(self) -> dict[str, Collection]:
        return dict(self._collections)
