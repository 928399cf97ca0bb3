"""Helper process for the kill-9 test of the acknowledgement path: stores memories in batches as fast as they are
acknowledged (the background embedder falls behind) and prints each acknowledged id."""

import sys
from pathlib import Path

from persmem_memory_hnsw.collection import Collection, NewMemory
from persmem_memory_hnsw.config import MemoryConfig
from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files
from persmem_memory_hnsw.embedding.background import BackgroundEmbedder

folder, start = Path(sys.argv[1]), int(sys.argv[2])
config = MemoryConfig(save_index_every=50, embed_batch=16)  # index saves and embeds land between kills too
embedding = BackgroundEmbedder(batch=config.embed_batch).start()
col = Collection("memories", folder, OnnxEmbedder(default_model_files()), config, embedding=embedding).open()
print("ready", flush=True)
i = start
while True:
    batch = [NewMemory(content=f"record {n}: the {['red', 'green', 'blue'][n % 3]} crate holds item {n * 7}",
                       project="p", type="note", tags=[], memory_id=f"k{n}") for n in range(i, i + 20)]
    col.store(batch, author="kite", dedup=False)
    print(" ".join(f"k{n}" for n in range(i, i + 20)), flush=True)
    i += 20
