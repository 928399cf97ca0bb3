"""Memory on a NATS JetStream cluster (docs/scale-out.md).

- `replication.py`  every collection's log entries published to one stream and applied by every node; snapshots
                    for new nodes
- `following.py`    one collection on a cluster: following the stream, waiting for it, snapshots; `replicated`
"""
