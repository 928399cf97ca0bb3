"""Is a new memory already stored? An exact duplicate has the same project, author and content hash; a near
duplicate, by the same author in the same project, is close in words (Jaccard >= 0.9 on word sets) *and* in
meaning (cosine >= dedup_threshold): "step 2" and "step 3" embed almost alike but are different facts. The
words come first: they are looked up in the keyword index (word_twins), and only a store that has a twin there
is embedded before it is acknowledged, to compare the meaning; every other store is acknowledged unembedded.

Duplicates are looked for among one author's memories only (records.dedup_key says why). The caller holds the
collection's lock; `load` reads a live memory from the log."""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np

from ..store.records import Memory, dedup_key
from ..store.rows import Rows

WORDS = re.compile(r"\w+")


def exact_duplicate(rows: Rows, load: Callable[[str], Memory], project: str, author: str, digest: str) -> str | None:
    """The id of `author`'s memory in `project` whose content hash is `digest`, if one is live."""
    memory_id = rows.by_hash.get(dedup_key(project, author, digest))
    if memory_id is None:
        return None
    memory = load(memory_id)  # confirm: the key is a 64-bit digest of (project, author, hash)
    same = memory.project == project and memory.author == author and memory.content_hash == digest
    return memory_id if same else None


def word_twins(rows: Rows, load: Callable[[str], Memory], project: str, author: str, content: str,
               limit: int = 64) -> list[str]:
    """Ids of `author`'s live one-chunk memories in `project` that share at least 90% of their words with
    `content` (Jaccard on word sets): the candidates for a near duplicate, found through the keyword index, so
    the new memory needs no vector yet. A twin lacks at most a ninth of `content`'s words, so it holds one of
    any ninth-plus-one of them: the rarest of those are looked up, and the few memories that hold one of them
    are compared in full (at most `limit`, the ones holding the rarest words first)."""
    project_code, author_code = rows.projects.code.get(project), rows.authors.code.get(author)
    if project_code is None or author_code is None:
        return []
    words = set(WORDS.findall(content.casefold()))
    need = len(words) // 9 + 1
    rarity = []  # (how many rows hold the word's term, those rows) for words the keyword index knows of
    lexical = rows.lexical
    for word in words:
        terms = lexical.analyzer.terms(word)
        if len(terms) != 1:
            continue  # a stop word: not indexed, so it cannot narrow the search
        found = lexical.rows_with(terms[0])
        rarity.append((len(found), found))
    if len(rarity) < need:
        return []  # too few indexed words to be sure of finding a twin (a text of stop words): exact dedup only
    rarity.sort(key=lambda item: item[0])
    picked = [found for _, found in rarity[:need] if len(found)]
    if not picked:
        return []  # one of the rarest words is in no memory: nothing shares 90% of the words
    candidates = np.unique(np.concatenate(picked))
    n = len(rows)
    candidates = candidates[candidates < n]
    keep = (rows.alive[candidates] & (rows.project[candidates] == project_code)
            & (rows.author[candidates] == author_code) & (rows.label_count[candidates] <= 1))
    twins = []
    for row in candidates[keep][:limit].tolist():
        head = rows.at_row[row]
        if head is not None and _jaccard(content, load(head.id).content) >= 0.9:
            twins.append(head.id)
    return twins


def near_duplicate(twins: list[str], vecs: np.ndarray, vector_of: Callable[[str], np.ndarray],
                   threshold: float) -> tuple[str, float] | None:
    """(id, similarity) of the twin (word_twins) closest in meaning to the one-chunk memory embedded as `vecs`,
    if its cosine similarity is at least `threshold`. `vector_of(id)`: a twin's vectors."""
    if len(vecs) != 1 or threshold > 1.0:
        return None
    best = None
    for twin in twins:
        other = vector_of(twin)
        if len(other) != 1:
            continue
        sim = float(other[0] @ vecs[0])
        if sim >= threshold and (best is None or sim > best[1]):
            best = (twin, sim)
    return best


def _jaccard(a: str, b: str) -> float:
    words_a, words_b = set(WORDS.findall(a.casefold())), set(WORDS.findall(b.casefold()))
    return len(words_a & words_b) / max(1, len(words_a | words_b))
