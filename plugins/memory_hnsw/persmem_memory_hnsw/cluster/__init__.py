"""Memory on a NATS JetStream cluster (docs/scale-out.md).

- `replication.py`  every collection's log entries published to one stream and applied by every node (`Replication`)
- `stream_names.py` the memory stream's names: the stream, each collection's subject, the binding marker, headers
- `follower.py`     the NATS side of following one collection: an ordered consumer and the thread that applies it
- `snapshots.py`    snapshots of the collections in the object store, for new nodes
- `collection_stream.py` one collection on a cluster: following the stream, waiting for it, snapshots; `replicated`
"""
