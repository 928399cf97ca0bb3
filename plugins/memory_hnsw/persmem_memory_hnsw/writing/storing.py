"""Storing new memories: duplicates, supersedes links (named or detected), labels, one log write for the batch.

`c` is the Collection. A store is acknowledged once an fsync covers it (writing/commit.py); without a background
embedder each memory is embedded before that, with one it is embedded afterwards (writing/embedded.py).
"""

from __future__ import annotations

import time

import numpy as np

from persmem_core.sdk import UserError

from ..cluster.collection_stream import replicated
from ..cluster.replication import Behind, ReplicationFailed
from ..lifecycle.dedup import exact_duplicate, near_duplicate, word_twins
from ..lifecycle.restatement import Candidate, candidates, closest, says_change
from ..lifecycle.supersession import find_superseded
from ..permissions import BOOTSTRAP_TYPES, check_change, is_private, may_edit, visible_to
from ..search.weighing import CONSOLIDATED_TYPE
from ..store.heap import release_freed_memory
from ..store.records import LinkChange, Memory, Put, content_hash, new_id
from .commit import commit, sync
from ..store.new_memory import NewMemory, check_new


@replicated
def store(c, items: list[NewMemory], *, author: str, dedup: bool = True,
          editors: dict[str, list[str]] | None = None) -> list[dict]:
    """Store `items` for `author` (one log write for all, all or nothing on a refusal), durably: returns once
    an fsync covers them. They are found by keyword at once and by meaning once the background embedder has
    embedded them (`wait_embedded`; without one, each is embedded before this returns). An item's
    `supersedes` must name memories of this collection that its author may change (`editors` grants);
    with `detect_supersession`, an older memory it restates is linked when it is embedded
    (supersession.find_superseded). A result says `"supersedes": [{"id", "how", ...}]` when it names links."""
    for item in items:
        check_new(c.config, item)
    editors = editors or {}
    later = c.embedding is not None and hasattr(c.embedder, "chunk_counts")
    texts = [item.content for item in items]
    if later:
        counts, embedded = c.embedder.chunk_counts(texts), [None] * len(items)
        shown = [i for i, item in enumerate(items) if item.show_replaced]  # embedded now: the reply needs them
        for i, vecs in zip(shown, c.embedder.embed_chunks([texts[i] for i in shown]) if shown else [], strict=True):
            embedded[i] = vecs
    else:
        embedded = c.embedder.embed_chunks(texts)
        counts = [len(vecs) for vecs in embedded]
    results, puts, pending = [], [], []
    with c.lock.gen_wlock():
        first_label = c.rows.next_label
        now = time.time()
        batch_hashes: dict[tuple[str, str, str], str] = {}
        hinted: list[tuple[str, float, tuple[str, ...], bool]] = []  # (new id, its time, what it ranks above, says change)
        for i, item in enumerate(items):
            digest = content_hash(item.content)
            owner = item.author or author
            if item.memory_id and item.memory_id in c.memories:
                raise UserError(f"memory id {item.memory_id!r} already exists; use memory_update to change it.")
            explicit = check_supersedes(c, item.supersedes, item.memory_id, owner, editors)
            if dedup:
                duplicate = _duplicate_of(c, item, owner, digest, counts[i] == 1, embedded, i, batch_hashes)
                if duplicate is not None:
                    results.append(duplicate)
                    continue
            vecs = embedded[i]
            memory_id = item.memory_id or new_id()
            created = item.created if item.created is not None else now
            links = [LinkChange(action="linked", target=target, by=owner, at=now, how="explicit")
                     for target in explicit]
            made = [{"id": target, "how": "explicit"} for target in explicit]
            detect = bool(item.detect_supersession and not explicit and may_detect(c, item))
            if detect and vecs is not None:  # embedded already: look now
                found = superseded_link(c, item.project, owner, editors, created, item.content, vecs)
                if found is not None:
                    links, made = [found[0]], [found[1]]
                    explicit = [found[0].target]
                detect = False
            replaced = may_replace(c, item, owner, editors, vecs) if item.show_replaced and vecs is not None else []
            labels = c.rows.new_labels(counts[i])
            memory = Memory(id=memory_id, content=item.content, project=item.project, type=item.type,
                            tags=item.tags, author=owner, editor=item.editor or owner,
                            collection=c.name, created=created, updated=created, content_hash=digest,
                            context=item.context, reply_to=item.reply_to, labels=labels,
                            supersedes=list(explicit), link_history=links,
                            consolidates=list(item.consolidates), valid_until=item.valid_until,
                            review_after=item.review_after)
            batch_hashes[(item.project, owner, digest)] = memory_id
            put, vecs = _put_of(c, memory, vecs, detect)
            puts.append(put)
            pending.append((memory, vecs))
            result = {"status": "stored", "id": memory_id, "chunks": len(labels)}
            if made:
                result["supersedes"] = made
            if replaced:  # a search ranks the closest of the author's own below it; the reply names the rest
                own = closest([f for f in replaced if c.memories[f.id].author == owner])
                hinted.append((memory_id, created, tuple(i for i in own if i not in explicit),
                               says_change(item.content)))
                named = [f for f in replaced if f.id not in explicit and f.id not in c.rows.successor_of]
                if named:
                    result["may_replace"] = [{"id": f.id, "similarity": f.similarity} for f in named]
            results.append(result)
        try:
            end = commit(c, puts, pending, sync=False)
        except (Behind, ReplicationFailed):  # nothing of it was written: its labels are free again
            c.rows.next_label = first_label
            raise
        for memory_id, created, ids, changed in hinted:
            c.restatements.remember(memory_id, created, ids, lambda i: c.rows.heads[i].updated, changed)
        waiting = [memory.id for memory, vecs in pending if len(vecs) == 0]
        if waiting:
            c.queue_embedding(waiting)
    sync(c, end, [put.memory.id for put in puts])
    if len(items) >= 64:  # a bulk store leaves its batch garbage behind
        release_freed_memory()
    return results


def _duplicate_of(c, item: NewMemory, owner: str, digest: str, one_chunk: bool, embedded: list, i: int,
                  batch_hashes: dict) -> dict | None:
    """The store result for `item` when it repeats one of `owner`'s memories in its project: the same text
    (stored, or earlier in this batch), or, for a one-chunk text close in words to one of them, the same
    meaning (it is embedded now to compare: `embedded[i]`). None when it is new."""
    same = (exact_duplicate(c.rows, c.memory_of, item.project, owner, digest)
            or batch_hashes.get((item.project, owner, digest)))
    if same:
        return {"status": "duplicate", "id": same, "match": "exact"}
    twins = word_twins(c.rows, c.memory_of, item.project, owner, item.content) if one_chunk else []
    if not twins:
        return None
    if embedded[i] is None:
        embedded[i] = c.embedder.embed_chunks([item.content])[0]
    near = near_duplicate(twins, embedded[i], c.vectors_now, c.config.dedup_threshold)
    if near is None:
        return None
    return {"status": "duplicate", "id": near[0], "match": "near", "similarity": round(near[1], 4)}


def _put_of(c, memory: Memory, vecs: np.ndarray | None, detect: bool) -> tuple[Put, np.ndarray]:
    """The log entry of a new memory and the vectors to index: none yet (it waits for the background embedder,
    still asking for detection if it does), or those it was embedded with."""
    if vecs is None:
        return Put(memory=memory, vectors=b"", detect=detect), np.zeros((0, c.embedder.dim), dtype=np.float32)
    return Put(memory=memory, vectors=vecs.astype(np.float32).tobytes()), vecs


def superseded_link(c, project: str, owner: str, editors: dict[str, list[str]], created: float,
                     content: str, vecs: np.ndarray) -> tuple[LinkChange, dict] | None:
    """The link a new memory makes to an older one it restates (find_superseded), and how a store result
    names it; None when there is none. Write lock held."""
    found = find_superseded(c.rows, c.vectors, c.config, project=project, author=owner,
                            editors=editors, created=created, content=content, vecs=vecs,
                            load_content=lambda old_id: c.memory_of(old_id).content)
    if found is None:
        return None
    detail = f"similarity {found.similarity:.2f}; shared terms: {', '.join(found.shared_terms)}"
    change = LinkChange(action="linked", target=found.id, by=owner, at=time.time(), how="detected",
                        detail=detail)
    return change, {"id": found.id, "how": "detected", "similarity": found.similarity,
                    "shared_terms": found.shared_terms}

def check_supersedes(c, supersedes: list[str], memory_id: str | None, owner: str,
                     editors: dict[str, list[str]]) -> list[str]:
    """The distinct ids `supersedes` names, each checked: a live memory of this collection, not the memory
    `memory_id` itself, that `owner` may see and change. Write lock held."""
    targets = list(dict.fromkeys(supersedes))
    for target in targets:
        if memory_id is not None and target == memory_id:
            raise UserError(f"memory {target!r} cannot supersede itself; remove it from supersedes.")
        head = c.memories.get(target)
        if head is None or not visible_to(c.config, c.name, owner, head):
            raise UserError(f"supersedes names {target!r}, but there is no memory {target!r} in collection "
                            f"{c.name!r}. Give the id of a stored memory (memory_search finds ids), or "
                            "leave supersedes empty.")
        check_change(editors, owner, head, "supersede")
    return targets

def may_replace(c, item: NewMemory, owner: str, editors: dict[str, list[str]], vecs: np.ndarray) -> list[Candidate]:
    """The older memories `item` most likely restates (lifecycle/restatement.py): memories `owner` may change.
    None for a conversation or document piece, a private collection's memory, or a bootstrap or consolidated
    entry. Write lock held (before it is added)."""
    if (is_private(c.config, c.name) or item.context or item.reply_to or item.type in BOOTSTRAP_TYPES
            or item.type == CONSOLIDATED_TYPE):
        return []
    found = candidates(c.rows, c.vectors, c.config, project=item.project, content=item.content, vecs=vecs,
                       before=item.created, allowed=lambda head: (visible_to(c.config, c.name, owner, head)
                                                                  and may_edit(editors, owner, head.author)))
    return found


def may_detect(c, item: NewMemory) -> bool:
    """Look for a memory this one restates? Not in private collections (session turns are pieces of one
    conversation) and not for bootstrap or consolidated entries."""
    return (c.config.supersede_detect and not is_private(c.config, c.name)
            and item.type not in BOOTSTRAP_TYPES and item.type != CONSOLIDATED_TYPE)
