"""persmem memory plugin: hybrid memory on hnswlib + msgspec sidecar logs + a local ONNX embedder.

Modules, one job each (hooks, then entry points, then the service, then the domain rooms; nothing imports upward):
- plugin.py        the hook implementations (what persmem sees)
- hookspecs.py     the hooks this plugin adds (register_embedders, inbox_summary) and their answers' types
- config.py        the [memory] config section
- tools.py         the MCP tools (persMEM's names and arguments)
- panels.py        the dashboard panels (Overview, Memories, Lifecycle); panel_templates/ holds their templates
- commands.py      `persmem memory ...`
- service.py       the plugin's service in host.state: all collections, the shared embedder, the owner lock
- collection.py    one collection: the lock, the write path, reads, search
- permissions.py   who may change a memory
- sessions_answers.py  the memory plugin's answers to the sessions plugin's hooks
- chroma_import.py reading a persMEM ChromaDB store
- store/           the record log, the rows, the checkpoint, opening a collection
- search/          the vector graph, BM25, fusion, what the query says, replies
- embedding/       the ONNX embedder, the background queue, model export
- lifecycle/       later statements, consolidation, duplicates, and how they weigh in a search
- cluster/         replication over NATS JetStream
- panel_templates/ the panels' Jinja templates
"""
