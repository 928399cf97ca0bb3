"""The memory stream's names, shared by the node that publishes to it (replication.py) and the followers that
read it (follower.py): the stream, each collection's subject, the binding marker, the header that names the write
before this one, and what a write is sealed as.
"""

from __future__ import annotations

STREAM = "PERSMEM_MEMORY"
SUBJECT_PREFIX = "persmem.memory."
PURPOSE = b"memory.replica"  # what a stream message was sealed as before messages were bound to their place
WRITE_KIND = b"persmem.memory.write"  # what a bound stream message is sealed as (with its place: StreamBinding)
MARKER = SUBJECT_PREFIX + "_binding"  # the stream's binding marker (no collection is called that)
BEFORE = "Nats-Expected-Last-Subject-Sequence"  # the header holding the write before this one on its subject


def subject(collection: str) -> str:
    return SUBJECT_PREFIX + collection
