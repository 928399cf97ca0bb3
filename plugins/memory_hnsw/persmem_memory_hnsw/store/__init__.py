"""What is kept: the record log, the rows in memory, the two indexes over them, and opening a collection.

- `records.py`     the Memory record, its head, and the log entry types
- `log.py`         the append-only, checksummed, fsynced record log (group commit)
- `rows.py`        the live memories in memory: heads, numpy columns, tags, label -> row, log spans, BM25
- `vectors.py`     the hnswlib index: labels, slot reuse, checksummed save/load
- `lexical.py`     BM25 over numpy postings, with stemming
- `query.py`       filters, tags, labels and dates read from what a caller typed (tools and panels), and the rows
                   they match
- `contexts.py`    neighbouring chunks' text and the question a chunk replies to, kept with it
- `checkpoint.py`  the rows, BM25 and int8 vectors saved as of a log offset, so a restart need not replay the log:
                   its format, names, dropping it
- `checkpoint_save.py`  writing the checkpoint (temp file, fsync, rename, then its sidecar)
- `checkpoint_load.py`  loading a checkpoint that fits the log, model and format into empty rows
- `replay.py`      opening a collection: checkpoint or log replay, model check, index load + reconcile, or rebuild
- `new_memory.py`  what a store is given (NewMemory) and the checks every new text passes
- `retrievals.py`  how often each memory was retrieved (statistics ranking weighs, saved with the index)
- `key_check.py`   are the keys the sealed files name on hand? (before a server takes the store)
- `heap.py`        growing numpy columns, handing freed memory back to the OS
"""
