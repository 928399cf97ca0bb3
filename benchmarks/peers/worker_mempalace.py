"""MemPalace 3.11.0 in-process: a palace (chromadb backend) with its default embedder, chromadb's ONNX
all-MiniLM-L6-v2, whose model files the bench placed where chromadb looks for them (no download).

Batches go in as its miner files drawers: one `upsert` on the palace's drawers collection (`palace.get_collection`)
with the drawer metadata (wing = the project, room, filed_at, ...). A single durable store is its MCP tool function
`tool_add_drawer` (idempotency check, write-ahead log, upsert, read-back). Search is `searcher.search_memories`,
what its MCP `mempalace_search` tool calls (vector candidates re-ranked with BM25), with that tool's default
max_distance 1.5; the project filter is the wing.
"""

import os
from datetime import datetime
from pathlib import Path

from worker_common import run


class Store:
    def open(self, folder: Path) -> None:
        from mempalace.palace import get_collection

        folder.mkdir(parents=True, exist_ok=True)
        self.folder = folder
        self.palace = str(folder / "palace")
        os.environ["MEMPALACE_PALACE_PATH"] = self.palace  # what its MCP tools read
        self.col = get_collection(self.palace, create=True)

    def store_batch(self, items) -> None:
        now = datetime.now().isoformat()
        self.col.upsert(ids=[x["id"] for x in items], documents=[x["content"] for x in items],
                        metadatas=[{"wing": x["project"], "room": "notes", "source_file": "", "added_by": "bench",
                                    "filed_at": now, "last_modified": now, "chunk_index": 0} for x in items])

    def store_one(self, item) -> None:
        from mempalace.mcp_server import tool_add_drawer

        result = tool_add_drawer(wing=item["project"], room="notes", content=item["content"], added_by="bench")
        assert result.get("success"), result

    def wait_ready(self) -> None:
        pass

    def search(self, query, k, project=None):
        from mempalace.searcher import search_memories

        res = search_memories(query, palace_path=self.palace, wing=project, n_results=k, max_distance=1.5)
        assert "error" not in res, res
        return [h["drawer_id"] for h in res["results"]]

    def disk_folder(self):
        return self.folder

    def close(self) -> None:
        pass


if __name__ == "__main__":
    run(Store)
