"""Changing stored memories: a new version, a delete, a link undone, feedback, a consolidated memory, an import's
lifecycle. Each is one log append under the write lock; the lifecycle ones (links, feedback) keep text, labels
and vectors (`rewrite`), so a kill -9 never leaves half a link, and none of them deletes anything.

`c` is the Collection; who may change what is permissions.py's.
"""

from __future__ import annotations

import time

import msgspec
import numpy as np

from persmem_core.sdk import UserError

from ..cluster.collection_stream import replicated
from ..permissions import check_change, may_edit
from ..store.records import Delete, Feedback, LinkChange, Memory, Put, content_hash, trim_feedback, version_of
from ..store.replay import matrix
from .commit import append, commit, maintain
from .storing import check_supersedes
from ..store.new_memory import NewMemory, check_content, check_new

MAX_NOTE_CHARS = 500  # a memory_validate note


@replicated
def update(c, memory_id: str, *, editor: str, editors: dict[str, list[str]], content: str | None = None,
           tags: list[str] | None = None, type: str | None = None, project: str | None = None,
           valid_until: float | None = None, review_after: float | None = None) -> Memory:
    """A new version made by `editor`, who must be the author or granted by `editors` (permissions.py).
    `valid_until` / `review_after`: None leaves them as they are, 0.0 clears them."""
    current = c.get(memory_id)
    vecs = c.embedder.embed_chunks([content])[0] if content is not None and content != current.content else None
    if content is not None:
        check_content(c.config, content)
    with c.lock.gen_wlock():
        if memory_id not in c.memories:
            raise UserError(f"no memory {memory_id!r} in collection {c.name!r}.")
        check_change(editors, editor, c.memories[memory_id], "update", new_type=type)
        current = c.memory_of(memory_id)
        if vecs is None:
            vecs = c.logged_vectors(memory_id)
            labels = current.labels
        elif len(vecs) == len(current.labels):  # as many chunks as before: same labels, vectors replaced
            labels = current.labels
        else:
            labels = c.rows.new_labels(len(vecs))
        snapshot = version_of(current)
        new_content = current.content if content is None else content
        memory = msgspec.structs.replace(
            current, content=new_content, tags=current.tags if tags is None else tags,
            type=type or current.type, project=project or current.project, updated=time.time(),
            version=current.version + 1, editor=editor, content_hash=content_hash(new_content), labels=labels,
            history=[*current.history, snapshot],
            valid_until=current.valid_until if valid_until is None else valid_until,
            review_after=current.review_after if review_after is None else review_after,
        )
        commit(c, [Put(memory=memory, vectors=vecs.astype(np.float32).tobytes())], [(memory, vecs)])
        return memory

@replicated
def delete(c, memory_id: str, *, by: str, editors: dict[str, list[str]]) -> Memory:
    """Delete for `by`, who must be the author or granted by `editors` (permissions.py)."""
    with c.lock.gen_wlock():
        if memory_id not in c.memories:
            raise UserError(f"no memory {memory_id!r} in collection {c.name!r}.")
        check_change(editors, by, c.memories[memory_id], "delete")
        memory = c.memory_of(memory_id)
        [(start, end)] = append(c, [Delete(id=memory_id, at=time.time(), by=by)])
        c.log.dead_bytes += c.rows.span_bytes(memory_id) + end - start  # as a replay counts them
        gone = c.rows.remove(memory_id)
        c.vectors.remove(gone.labels)
        c.changes_since_save += 1
        maintain(c)
        return memory

@replicated
def unlink(c, memory_id: str, *, supersedes_id: str | None, by: str, editors: dict[str, list[str]]) -> Memory:
    """Undo supersedes links. `memory_id` is the newer memory (drop its link to `supersedes_id`, or all its
    links when None) or the older one (drop the link of the memory that supersedes it). A link may be undone
    by the author of either side, or an agent `editors` grants over either author: with no `supersedes_id`,
    someone who may change only some older memories drops only the links to those. Returns the newer memory
    as stored."""
    with c.lock.gen_wlock():
        head = c.visible_head(memory_id, by)
        if supersedes_id and supersedes_id == memory_id:
            raise UserError(f"memory {memory_id!r} cannot supersede itself; give the id of the memory it replaces "
                            "as supersedes_id, or leave supersedes_id empty.")
        if head.supersedes and (not supersedes_id or supersedes_id in head.supersedes):
            newer, targets = head, [supersedes_id] if supersedes_id else list(head.supersedes)
        elif supersedes_id:
            raise UserError(f"memory {memory_id!r} does not supersede {supersedes_id!r}"
                            + (f"; it supersedes {', '.join(head.supersedes)}." if head.supersedes else ".")
                            + " memory_get shows a memory's links.")
        elif memory_id in c.rows.successor_of:
            newer, targets = c.memories[c.rows.successor_of[memory_id]], [memory_id]
        else:
            raise UserError(f"memory {memory_id!r} supersedes nothing and nothing supersedes it: there is no link "
                            "to undo.")
        sides = [newer.author] + [c.memories[t].author for t in targets if t in c.memories]
        if not may_edit(editors, by, newer.author):  # then only the links to memories `by` may change
            heads = c.memories
            targets = [t for t in targets if t in heads and may_edit(editors, by, heads[t].author)]
        if not targets:
            raise UserError(f"you are {by!r}; only the authors of the linked memories ({', '.join(sorted(set(sides)))})"
                            " or an agent [memory] editors grants over one of them may undo this link. Ask one of "
                            "them.")
        current = c.memory_of(newer.id)
        now = time.time()
        changes = [LinkChange(action="unlinked", target=t, by=by, at=now, how="unlink") for t in targets]
        return rewrite(c, msgspec.structs.replace(
            current, supersedes=[t for t in current.supersedes if t not in targets],
            link_history=[*current.link_history, *changes]))

@replicated
def link(c, memory_id: str, *, supersedes: list[str], by: str, editors: dict[str, list[str]]) -> Memory:
    """Link memory `memory_id` as superseding the older memories `supersedes` (as memory_store(supersedes=)
    does at store time): `by` must be allowed to change it and each of them. Returns it as stored."""
    with c.lock.gen_wlock():
        head = c.visible_head(memory_id, by)
        check_change(editors, by, head, "update")
        targets = check_supersedes(c, supersedes, memory_id, by, editors)
        current = c.memory_of(memory_id)
        new = [t for t in targets if t not in current.supersedes]
        if not new:
            return current
        now = time.time()
        changes = [LinkChange(action="linked", target=t, by=by, at=now, how="explicit") for t in new]
        return rewrite(c, msgspec.structs.replace(current, supersedes=[*current.supersedes, *new],
                                                  link_history=[*current.link_history, *changes]))

@replicated
def validate(c, memory_id: str, *, by: str, helpful: bool, note: str = "") -> Memory:
    """Record `by`'s verdict on a memory it can see (its latest verdict replaces its earlier ones in the
    memory's confidence). Returns the memory as stored."""
    if not isinstance(note, str):
        raise UserError("note must be a string (why the memory helped or not), or empty.")
    if len(note) > MAX_NOTE_CHARS:
        raise UserError(f"note is {len(note)} characters; at most {MAX_NOTE_CHARS}. Say why in a sentence or two.")
    with c.lock.gen_wlock():
        c.visible_head(memory_id, by)
        current = c.memory_of(memory_id)
        verdict = Feedback(by=by, at=time.time(), helpful=bool(helpful), note=note.strip())
        return rewrite(c, msgspec.structs.replace(current, feedback=trim_feedback([*current.feedback, verdict])))

@replicated
def write_consolidated(c, item: NewMemory, *, author: str) -> dict:
    """Store the consolidated memory `item` (its `memory_id` and `consolidates` set by the caller) for
    `author`, or, when its id exists, make a new version of it with the new content, tags and members (the
    previous one kept in its history). Nothing changes when content, tags and members are the same:
    `{"status": "unchanged"}`. One log append."""
    if not item.memory_id:
        raise ValueError("a consolidated memory needs its deterministic id")
    check_new(c.config, item)
    members = list(dict.fromkeys(item.consolidates))
    with c.lock.gen_rlock():
        existing = c.memories.get(item.memory_id)
        same = (existing is not None and existing.consolidates == tuple(members)
                and existing.tags == tuple(item.tags) and c.memory_of(item.memory_id).content == item.content)
    if same:
        return {"status": "unchanged", "id": item.memory_id}
    if existing is None:
        made = c.store([NewMemory(**{**item.__dict__, "consolidates": members, "supersedes": [],
                                        "detect_supersession": False})], author=author, dedup=False)
        return made[0]
    vecs = c.embedder.embed_chunks([item.content])[0]
    with c.lock.gen_wlock():
        if item.memory_id not in c.memories:
            raise UserError(f"consolidated memory {item.memory_id!r} was deleted meanwhile; run again.")
        current = c.memory_of(item.memory_id)
        if current.author != author:
            raise UserError(f"memory {item.memory_id!r} belongs to {current.author!r}, not {author!r}.")
        labels = current.labels if len(vecs) == len(current.labels) else c.rows.new_labels(len(vecs))
        snapshot = version_of(current)
        memory = msgspec.structs.replace(
            current, content=item.content, tags=list(item.tags), consolidates=members, updated=time.time(),
            version=current.version + 1, editor=item.editor or current.editor,
            content_hash=content_hash(item.content), labels=labels, history=[*current.history, snapshot])
        commit(c, [Put(memory=memory, vectors=vecs.astype(np.float32).tobytes())], [(memory, vecs)])
        return {"status": "updated", "id": memory.id, "chunks": len(labels)}

@replicated
def restore_lifecycle(c, memory_id: str, *, supersedes: list[str], link_history: list[LinkChange],
                      feedback: list[Feedback]) -> bool:
    """Give a memory an import just stored its exported links, link history and feedback, as they were (no
    permission checks: the operator's import). One log append, and none when they are already so. Returns
    whether it wrote."""
    with c.lock.gen_wlock():
        if memory_id not in c.memories:
            raise UserError(f"no memory {memory_id!r} in collection {c.name!r}.")
        current = c.memory_of(memory_id)
        wanted = (list(supersedes), list(link_history), trim_feedback(list(feedback)))
        if (current.supersedes, current.link_history, current.feedback) == wanted:
            return False
        rewrite(c, msgspec.structs.replace(current, supersedes=wanted[0], link_history=wanted[1],
                                              feedback=wanted[2]))
        return True

def rewrite(c, memory: Memory) -> Memory:
    """Log `memory` with only lifecycle fields changed: same version, text, labels and vectors. Write lock
    held."""
    entry = c.entry_of(memory.id)  # not embedded yet: it stays so, still asking for detection if it did
    vecs = matrix(entry.vectors, c.embedder.dim)
    commit(c, [Put(memory=memory, vectors=entry.vectors, detect=entry.detect)], [(memory, vecs)])
    return memory
