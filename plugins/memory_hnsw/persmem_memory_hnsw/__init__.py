"""persmem memory plugin: hybrid memory on hnswlib + msgspec sidecar logs + a local ONNX embedder.

Modules, one job each (hooks, then entry points, then the service, then the domain; nothing imports upward):
- plugin.py        the hook implementations (what persmem sees)
- hookspecs.py     the hooks this plugin adds (register_embedders, inbox_summary)
- config.py        the [memory] config section
- tools.py         the MCP tools (persMEM's names and arguments)
- panels.py        the dashboard panels (Overview, Memories, Lifecycle); panel_templates/ holds their templates
- commands.py      `persmem memory ...`
- export.py        `persmem model export` (a Hugging Face folder to an int8 ONNX export)
- service.py       the plugin's service in host.state: all collections, the shared embedder, the owner lock
- query.py         filters, tags, labels and dates read from what a caller typed (tools and panels)
- query_dates.py   the times a search query names ("in May 2023", "yesterday"), for date-aware ranking
- collection.py    one collection: the lock, the write path, reads, search
- rows.py          the live memories in memory: heads, numpy columns, tags, label -> row, log spans, BM25
- replay.py        opening a collection: checkpoint or log replay, model check, index load + reconcile, or rebuild,
                   reindex
- checkpoint.py    the rows, BM25 and int8 vectors saved as of a log offset, so a restart need not replay the log
- embedding.py     the background embedder: stores are acknowledged once logged, embedded in batches afterwards
- ranking.py       dense (graph or exact) + BM25, score fusion, then what the query and rows say (times, questions)
- lifecycle.py     how links, feedback, use, tiers, staleness and recency weigh in a search; the query-time
                   "later statement wins" rule
- supersession.py  does a new memory restate an older one? (memory_store's detected links, when it is embedded)
- consolidate.py   clusters of mature similar memories -> consolidated memories; the idle-time job
- sessions_answers.py  the memory plugin's answers to the sessions plugin's hooks
- replies.py       search replies sized for an AI: passages, budget, marks
- snapshot.py      reading the logs without the lock (stats, export, doctor)
- dedup.py         exact and near duplicates among one author's memories (words first, then meaning)
- contexts.py      neighbouring chunks' text and the question a chunk replies to, for memory_bulk_store
- permissions.py   who may change a memory
- records.py       the Memory record, its head, and the log entry types
- log.py           the append-only, checksummed, fsynced record log (group commit)
- vectors.py       the hnswlib index: labels, slot reuse, checksummed save/load
- lexical.py       BM25 over numpy postings, with stemming
- embedder.py      ONNX + tokenizers embedder, pinned model files, chunking
- heap.py          growing numpy columns, handing freed memory back to the OS
- replication.py   a NATS JetStream cluster: every collection's log entries published to one stream, applied by
                   every node; snapshots for new nodes
- backup.py        the backup hook's copy of each collection's log
- reseal.py        `persmem key migrate|rotate` for the memory store: every file sealed as new writes are
- chroma_import.py reading a persMEM ChromaDB store
"""
