"""Helper process for the lifecycle's kill -9 test: a stream of link writes (stores with supersedes, unlinks,
verdicts, deletes), printing an intent line before each write and an acknowledgement after it.

Lines: "s ID T..." / "L ID T..." (ID stored, or its links changed, to T...: intent / acknowledged),
"u ID T..." (an unlink leaving T...: intent), "d ID" / "D ID" (delete: intent / acknowledged)."""

import random
import sys
from pathlib import Path

from persmem_memory_hnsw.collection import Collection, NewMemory
from persmem_memory_hnsw.config import MemoryConfig
from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files

folder, start = Path(sys.argv[1]), int(sys.argv[2])
config = MemoryConfig(save_index_every=5)  # save the index (and the retrieval counts) often: kills land there too
col = Collection("memories", folder, OnnxEmbedder(default_model_files()), config).open()
rng = random.Random(start)
print("ready", flush=True)
i = start
while True:
    live = sorted(col.memories)
    targets = rng.sample(live, min(len(live), rng.choice([0, 1, 1, 2])))
    memory_id = f"k_{i}"
    print(f"s {memory_id} {' '.join(targets)}", flush=True)
    col.store([NewMemory(content=f"fact {i} about topic {i % 7}: value {rng.randint(0, 999)}", project="p",
                         type="fact", tags=[], memory_id=memory_id, supersedes=targets)], author="kite")
    print(f"L {memory_id} {' '.join(targets)}", flush=True)
    linked = sorted(m for m, head in col.memories.items() if head.supersedes)
    if i % 3 == 2 and linked:
        newer = rng.choice(linked)
        dropped = col.memories[newer].supersedes[0]
        left = [t for t in col.memories[newer].supersedes if t != dropped]
        print(f"u {newer} {' '.join(left)}", flush=True)
        col.unlink(newer, supersedes_id=dropped, by="kite", editors={})
        print(f"L {newer} {' '.join(left)}", flush=True)
    if i % 4 == 3:
        col.validate(rng.choice(live or [memory_id]), by=rng.choice(["kite", "wren"]), helpful=rng.random() < 0.5)
        col.record_retrievals(rng.sample(live, min(3, len(live))))
    if i % 7 == 6 and live:
        gone = rng.choice(live)
        print(f"d {gone}", flush=True)
        col.delete(gone, by="kite", editors={})
        print(f"D {gone}", flush=True)
    i += 1
