"""The write path of a collection: storing, changing, the embedder's vectors, the stream's writes, and the commit
every one of them ends in. Each is a function of the Collection (`c`), bound to it as a method in collection.py.

- `storing.py`      store: duplicates, supersedes links (named or detected), labels, one log write per batch
- `changes.py`      update, delete, unlink, validate, consolidated memories, an import's lifecycle
- `embedded.py`     the background embedder's vectors logged and put in the index; detected restatements linked
- `from_stream.py`  on a cluster: the memory stream's writes applied in stream order
- `commit.py`       log, then rows and index; group fsync; compaction and index saves after
"""
