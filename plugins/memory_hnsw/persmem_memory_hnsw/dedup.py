"""Is a new memory already stored? An exact duplicate has the same project, author and content hash; a near
duplicate, by the same author in the same project, is close in meaning (cosine >= dedup_threshold) *and* in
words (Jaccard >= 0.9 on word sets): "step 2" and "step 3" embed almost alike but are different facts.

Duplicates are looked for among one author's memories only (records.dedup_key says why). The caller holds the
collection's lock; `load` reads a live memory from the log."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from .records import Memory, dedup_key
from .rows import Rows
from .vectors import VectorIndex

WORDS = re.compile(r"\w+")


def exact_duplicate(rows: Rows, load: Callable[[str], Memory], project: str, author: str, digest: str) -> str | None:
    """The id of `author`'s memory in `project` whose content hash is `digest`, if one is live."""
    memory_id = rows.by_hash.get(dedup_key(project, author, digest))
    if memory_id is None:
        return None
    memory = load(memory_id)  # confirm: the key is a 64-bit digest of (project, author, hash)
    same = memory.project == project and memory.author == author and memory.content_hash == digest
    return memory_id if same else None


def near_duplicate(rows: Rows, vectors: VectorIndex, load: Callable[[str], Memory], threshold: float, project: str,
                   author: str, content: str, vecs: np.ndarray) -> tuple[str, float] | None:
    """(id, similarity) of a near duplicate of a one-chunk `content` (embedded as `vecs`), if there is one."""
    if len(vecs) != 1 or vectors.live == 0 or threshold >= 1.0:
        return None
    if rows.projects.code.get(project) is None:
        return None
    labels, sims = vectors.search(vecs[0], 3)
    for label, sim in zip(labels, sims, strict=True):
        row = int(rows.label_row[label])
        head = rows.at_row[row] if row >= 0 else None
        if (head is not None and head.project == project and head.author == author and head.n_labels == 1
                and sim >= threshold):
            if _jaccard(content, load(head.id).content) >= 0.9:
                return head.id, float(sim)
    return None


def _jaccard(a: str, b: str) -> float:
    words_a, words_b = set(WORDS.findall(a.casefold())), set(WORDS.findall(b.casefold()))
    return len(words_a & words_b) / max(1, len(words_a | words_b))
