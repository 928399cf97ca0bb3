"""persmem memory plugin: hybrid memory on hnswlib + msgspec sidecar logs + a local ONNX embedder.

Modules, one job each:
- plugin.py     the hook implementations (what persmem sees)
- config.py     the [memory] config section
- records.py    the Memory record and the log entry types
- log.py        the append-only, checksummed, fsynced record log
- embedder.py   ONNX + tokenizers embedder, pinned model files, chunking
- vectors.py    the hnswlib index: labels, slot reuse, checksummed save/load
- lexical.py    BM25 over numpy postings, with stemming
- collection.py one collection: log + vectors + lexical, dedup, filters, fusion
- service.py    all collections, session bootstrap, stats
- tools.py      the MCP tools (persMEM's names and arguments)
- commands.py   `persmem memory ...`
- chroma_import.py  reading a persMEM ChromaDB store
"""
