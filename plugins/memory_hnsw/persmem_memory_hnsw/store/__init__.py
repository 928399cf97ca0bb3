"""The memories on disk and in memory: the record log, the rows, the checkpoint, opening a collection.

- `records.py`     the Memory record, its head, and the log entry types
- `log.py`         the append-only, checksummed, fsynced record log (group commit)
- `rows.py`        the live memories in memory: heads, numpy columns, tags, label -> row, log spans, BM25
- `checkpoint.py`  the rows, BM25 and int8 vectors saved as of a log offset, so a restart need not replay the log
- `replay.py`      opening a collection: checkpoint or log replay, model check, index load + reconcile, or rebuild
- `snapshot.py`    reading the logs without the lock (stats, export, doctor)
- `heap.py`        growing numpy columns, handing freed memory back to the OS
- `backup.py`      the backup hook's copy of each collection's log
- `reseal.py`      `persmem key migrate|rotate` for the memory store: every file sealed as new writes are
"""
