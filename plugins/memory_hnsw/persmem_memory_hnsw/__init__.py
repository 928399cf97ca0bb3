"""persmem memory plugin: hybrid memory on hnswlib + msgspec sidecar logs + a local ONNX embedder.

Modules, one job each (hooks, then entry points, then the service, then the domain rooms; nothing imports upward):
- plugin.py        the hook implementations (what persmem sees)
- hookspecs.py     the hook this plugin adds (register_embedders) and its answer's type
- config.py        the [memory] config section
- tools/           the MCP tools (persMEM's names and arguments), one module per kind of call
- panels.py        the dashboard panels (Overview, Memories, Lifecycle); panel_templates/ holds their templates
- commands.py      `persmem memory ...`
- cli_search.py    `persmem memory search QUERY`: memory_search through the running server, or the home itself
- export_format.py the JSON Lines records of `persmem memory export` and `import`: a memory as a record and back
- service.py       the plugin's service in host.state: all collections, the shared embedder, the owner lock
- access.py        one agent's door into the service: every read and write of tools, panels and answers to other
                   plugins, with the permission rules applied here
- collection.py    one collection: its state, opening, reads and search; the writes of writing/ bound to it
- permissions.py   who may change a memory
- sessions_answers.py  session turns for the sessions plugin: indexed in their private collection, searched back
- session_briefing.py  a session's briefing and a prompt's recall, current facts only (restated ones replaced)
- preferences.py   the user's standing preferences: in every briefing, recalled when a prompt leans on them
- snapshot.py      reading the logs without the lock (stats, export, doctor)
- backup.py        the backup hook's copy of each collection's log
- reseal.py        `persmem key migrate|rotate` for the memory store: every file sealed as new writes are
- chroma_import.py reading a persMEM ChromaDB store
- store/           what is kept: the record log, the rows, the vector and BM25 indexes, opening a collection
- search/          ranking at query time: fusion, what the query says, the lifecycle's weights, replies
- embedding/       the ONNX embedder, the background queue, model export
- lifecycle/       what a new memory is to the older ones (a restatement, a duplicate), and consolidation: mature
                   clusters of similar memories -> consolidated memories, the idle-time job
- writing/         the write path: store, changes, the embedder's vectors, the stream's writes, the commit
- cluster/         replication over NATS JetStream, and a collection following it
- panel_templates/ the panels' Jinja templates
"""
