"""Who a consolidation may gather: the snapshot of one collection's candidates and existing consolidated memories,
by (project, author) group, with their memory vectors; and the id a cluster's leader gives its consolidated memory.

A candidate is a live memory at least `consolidate_min_age_days` old, not of a procedural type (identity,
directive, preference, procedure: those are pinned as they are), not a consolidated memory itself, not
superseded, not expired and not already a member of one. The idle-time job also leaves out conversation pieces
(`conversations=False`): the turns of a conversation or document memory_bulk_store imported (stored with the
text around them or the question before them) and turn-typed entries, whose `created` is when they were said (an
imported 2023 chat is "mature" the moment it arrives); only an explicit consolidation gathers those. A memory's vector is the mean of its chunks' vectors
(from the log: exact float32), normalised. The snapshot holds the collection's read lock; nothing after it does.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np

from ..search.weighing import CONSOLIDATED_TYPE, PROCEDURAL_TYPES, expired
from ..store.records import ID_RE

TURN_TYPES = frozenset({"user", "assistant", "tool", "turn"})  # a conversation's turns, as sessions store them


@dataclass
class Group:
    """One (project, author) group's snapshot: candidates (ordered by created, id) and existing consolidated
    memories, with their unit memory vectors."""

    project: str
    author: str
    ids: list[str] = field(default_factory=list)
    created: list[float] = field(default_factory=list)
    vectors: list[np.ndarray] = field(default_factory=list)
    consolidated: list[tuple[str, list[str], np.ndarray]] = field(default_factory=list)  # (id, members, anchor)


def snapshot(col, config, *, author, project, now, conversations: bool = True) -> dict[tuple[str, str], Group]:
    """The candidates and the existing consolidated memories of `col` (only `author`'s and `project`'s when
    given), by (project, author), oldest first; taken under the read lock. `conversations=False` leaves out
    conversation pieces (conversation_piece)."""
    min_created = now - config.consolidate_min_age_days * 86400.0
    skip_types = PROCEDURAL_TYPES | {CONSOLIDATED_TYPE}
    groups: dict[tuple[str, str], Group] = {}
    with col.lock.gen_rlock():
        rows = col.rows
        successor_of, consolidated_into = rows.successor_of, rows.consolidated_into
        heads = [h for h in col.memories.values()
                 if (author is None or h.author == author) and (project is None or h.project == project)]
        heads.sort(key=lambda h: (h.created, h.id))
        for head in heads:
            if head.type == CONSOLIDATED_TYPE:
                members = [m for m in head.consolidates if m in col.memories]
                leader = _leader_of(head.id, head.consolidates)
                anchor_id = leader if leader in col.memories else head.id
                group = groups.setdefault((head.project, head.author), Group(head.project, head.author))
                group.consolidated.append((head.id, members, memory_vector(col, anchor_id)))
                continue
            if (head.type in skip_types or head.id in successor_of or head.id in consolidated_into
                    or head.created > min_created or expired(head.valid_until, now)):
                continue
            if not conversations and conversation_piece(col, head):
                continue
            group = groups.setdefault((head.project, head.author), Group(head.project, head.author))
            group.ids.append(head.id)
            group.created.append(head.created)
            group.vectors.append(memory_vector(col, head.id))
    return groups


def conversation_piece(col, head) -> bool:
    """A turn of a conversation (or a piece of a document) rather than a note: turn-typed, or stored by
    memory_bulk_store with the text around it or the question before it. Lock held."""
    if head.type in TURN_TYPES:
        return True
    memory = col.memory_of(head.id)
    return bool(memory.context or memory.reply_to)


def memory_vector(col, memory_id: str) -> np.ndarray:
    """A memory's unit vector: the mean of its chunks' vectors (logged; made now for one stored moments ago and
    not embedded yet), normalised."""
    vecs = col.vectors_now(memory_id)
    mean = vecs.mean(axis=0) if len(vecs) > 1 else vecs[0]
    norm = float(np.linalg.norm(mean))
    return (mean / norm if norm > 0 else mean).astype(np.float32)


def _leader_of(con_id: str, members) -> str:
    """The leader of a consolidated memory: the member its id was made from (the first member otherwise)."""
    for member in members:
        if consolidated_id(member) == con_id:
            return member
    return members[0] if members else ""


def consolidated_id(leader_id: str) -> str:
    """The id of the consolidated memory a leader starts: "con_" + its id (hashed when that would be too long)."""
    candidate = f"con_{leader_id}"
    if ID_RE.match(candidate):
        return candidate
    return "con_" + hashlib.blake2b(leader_id.encode(), digest_size=16).hexdigest()
