"""Helper process for the kill -9 test: opens a collection, says "ready", consolidates it (writing), says
"done". The test kills it somewhere in between."""

import sys
from pathlib import Path

from persmem_memory_hnsw.collection import Collection
from persmem_memory_hnsw.config import MemoryConfig
from persmem_memory_hnsw.lifecycle.consolidation import consolidate
from persmem_memory_hnsw.embedding.embedder import OnnxEmbedder, default_model_files

config = MemoryConfig(consolidate_min_age_days=0)
col = Collection("memories", Path(sys.argv[1]), OnnxEmbedder(default_model_files()), config).open()
print("ready", flush=True)
report = consolidate(col, config, dry_run=False)
print(f"done {report.created}", flush=True)
