"""persmem in-process, through its Python API: `open_service(Host)`, `Collection.store` (a batch, or one memory:
durable on return) and `Collection.search` (hybrid, including the query's embedding). Run by persmem's own venv.
A fresh store is a fresh collection of one service; the job's "persmem_config" goes into persmem.toml.
"""

import itertools
import os
from pathlib import Path

from worker_common import run

JOB_CONFIG: dict = {}


class Store:
    service = None

    def open(self, folder: Path) -> None:
        from persmem_core.host import Host
        from persmem_core.testing import write_config
        from persmem_memory_hnsw.service import open_service

        if Store.service is None:
            home = folder.parent / "persmem-home"
            write_config(home, JOB_CONFIG or None)
            Store.service = open_service(Host(environ=dict(os.environ, PERSMEM_HOME=str(home))))
        self.col = Store.service.collection(folder.name.replace(".", "-"), create=True)
        self.col.embedder.embed_query("warm up")  # the model loads on first use: not part of the first batch

    def _new(self, item):
        from persmem_memory_hnsw.collection import NewMemory

        return NewMemory(content=item["content"], project=item["project"], type="session_note", tags=[],
                         memory_id=item["id"])

    def store_batch(self, items) -> None:
        """As memory_bulk_store does with its defaults: consecutive items of one project are pieces of one
        conversation, each indexed (for keyword search) with up to 300 characters of its neighbours."""
        from persmem_memory_hnsw.store.contexts import neighbour_contexts

        memories = [self._new(x) for x in items]
        for _, same_project in itertools.groupby(memories, key=lambda m: m.project):
            group = list(same_project)
            for memory, context in zip(group, neighbour_contexts([m.content for m in group], 300), strict=True):
                memory.context = context
        self.col.store(memories, author="bench", dedup=False)

    def store_one(self, item) -> None:
        self.col.store([self._new(item)], author="bench")

    def wait_ready(self) -> None:
        if hasattr(self.col, "wait_embedded"):  # an asynchronous store: its vectors may still be on their way
            self.col.wait_embedded()

    def search(self, query, k, project=None):
        from persmem_memory_hnsw.store.query import Filters

        return [h.memory.id for h in self.col.search(query, top_k=k, filters=Filters(project=project))]

    def disk_folder(self):
        return self.col.folder

    def close(self) -> None:
        pass


if __name__ == "__main__":
    import json
    import sys

    JOB_CONFIG.update(json.loads(Path(sys.argv[1]).read_text()).get("persmem_config") or {})
    try:
        run(Store)
    finally:
        if Store.service is not None:
            Store.service.stop()
