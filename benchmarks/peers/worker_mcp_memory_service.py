"""mcp-memory-service 12.4.0 in-process: its SqliteVecMemoryStorage (the sqlite-vec "lite" backend) with its own ONNX
all-MiniLM-L6-v2 embedder, whose model files the bench placed where it looks for them (no download).

Writes: `store_batch` (one transaction, one batched encode) and `store` (one memory). Search: `search_memories`,
the call behind its MCP `memory_search` tool, in that tool's default mode ("semantic"); the project filter is its
`store` namespace. Its in-process embedding cache is switched off so that every query pays its embedding, as on
every other system. Memories are addressed by content hash: the bench maps each hash back to the LoCoMo turn id
(a turn whose text repeats an earlier one's is refused as a duplicate, and answers with the first id).
"""

import asyncio
import time
from pathlib import Path

from mcp_memory_service.models.memory import Memory
from mcp_memory_service.storage.sqlite_vec import SqliteVecMemoryStorage
from mcp_memory_service.utils.hashing import generate_content_hash

from worker_common import run

LOOP = asyncio.new_event_loop()


def wait(coro):
    return LOOP.run_until_complete(coro)


class Store:
    def open(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.storage = SqliteVecMemoryStorage(str(folder / "memory.db"), embedding_model="all-MiniLM-L6-v2")
        wait(self.storage.initialize())
        model = type(self.storage.embedding_model).__name__
        assert model == "ONNXEmbeddingModel", f"mcp-memory-service fell back to {model}, not its ONNX embedder"
        self.storage.enable_cache = False
        self.ids = {}

    def _memory(self, item) -> Memory:
        digest = generate_content_hash(item["content"])
        self.ids.setdefault(digest, item["id"])
        return Memory(content=item["content"], content_hash=digest, tags=[], memory_type="note",
                      created_at=time.time())

    def store_batch(self, items) -> None:
        by_project = {}
        for x in items:  # its namespace is per call
            by_project.setdefault(x["project"], []).append(self._memory(x))
        for project, memories in by_project.items():
            results = wait(self.storage.store_batch(memories, store=project))
            failed = [m for ok, m in results if not ok and "uplicate" not in m]
            assert not failed, failed[:3]

    def store_one(self, item) -> None:
        ok, message = wait(self.storage.store(self._memory(item), store=item["project"]))
        assert ok or "uplicate" in message, message

    def wait_ready(self) -> None:
        pass

    def search(self, query, k, project=None):
        res = wait(self.storage.search_memories(query=query, mode="semantic", limit=k, store=project))
        assert "error" not in res, res["error"]
        return [self.ids.get(m["content_hash"], m["content_hash"]) for m in res["memories"]]

    def disk_folder(self):
        return self.folder

    def close(self) -> None:
        wait(self.storage.close())


if __name__ == "__main__":
    run(Store)
