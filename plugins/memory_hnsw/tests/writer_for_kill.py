"""Helper process for the kill-9 sweep: stores memories in a loop and prints each acknowledged id."""

import sys
from pathlib import Path

from persmem_memory_hnsw.collection import Collection, NewMemory
from persmem_memory_hnsw.config import MemoryConfig
from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files

folder, start = Path(sys.argv[1]), int(sys.argv[2])
config = MemoryConfig(save_index_every=7)  # save the index often, so kills land in saves too
col = Collection("memories", folder, OnnxEmbedder(default_model_files()), config).open()
print("ready", flush=True)
i = start
while True:
    memory_id = f"k{i}"
    if i % 5 == 4:  # some updates and deletes too
        target = f"k{i - 1}"
        if target in col.memories:
            print(f"u {target}", flush=True)  # intent: the update may land even if we die before "U"
            col.update(target, editor="kite", editors={},
                       content=f"updated note number {i - 1} about topic {i % 13}")
            print(f"U {target} {i - 1}", flush=True)
    col.store([NewMemory(content=f"note number {i} about topic {i % 13} and item {i * 7}", project="p",
                         type="note", tags=[], memory_id=memory_id)], author="kite", dedup=False)
    print(f"S {memory_id}", flush=True)
    if i % 11 == 10:
        print(f"d k{i - 3}", flush=True)  # intent: the delete may land even if we die before "D"
        col.delete(f"k{i - 3}", by="kite", editors={})
        print(f"D k{i - 3}", flush=True)
    i += 1
