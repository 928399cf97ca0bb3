"""Supersession at store time: does a new memory restate an older one of its project? (memory_store's detected
links; search/weighing.py weighs the links in a search, and its `restated` rule is the query-time counterpart).
Deterministic, no LLM: similarity in meaning, shared subject words, and no look-alike family (a recurring note
shape is not a restatement). docs/memory.md "Later facts win" has the measured reasoning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..config import MemoryConfig
from ..store.lexical import STOP_WORDS, WORD_RE, Analyzer
from ..search.weighing import CONSOLIDATED_TYPE, FAMILY_MARGIN
from ..permissions import BOOTSTRAP_TYPES, may_edit
from ..search.ranking import nearest_rows
from .restatement import says_change

if TYPE_CHECKING:
    from ..store.records import Head
    from ..store.rows import Rows
    from ..store.vectors import VectorIndex

_analyzer: Analyzer | None = None


def _stems() -> Analyzer:
    global _analyzer
    if _analyzer is None:
        _analyzer = Analyzer()
    return _analyzer


def subject_terms(text: str) -> set[str]:
    """The words a memory is about: its word tokens without stop words, stemmed (as BM25 indexes them), so
    "databases" and "database" count as one shared term. Numbers are left out: a restated fact usually
    changes them ("port 8080" -> "port 9090"), so they say nothing about the subject."""
    return {term for term in _stems().terms(text) if not term.isdigit()}


def words_of(text: str, terms: set[str]) -> list[str]:
    """`terms` (stems) as `text` spells them, sorted: what a reply shows ("staging", not "stage")."""
    words = [w for w in WORD_RE.findall(text.casefold()) if w not in STOP_WORDS and len(w) < 64]
    spelled = {}
    for word, term in zip(words, _stems().terms(text), strict=True):
        if term in terms:
            spelled.setdefault(term, word)
    return sorted(spelled.values())


class Superseded(NamedTuple):
    id: str
    similarity: float  # cosine, best chunk of the new memory vs best chunk of the older one
    shared_terms: list[str]  # as the new memory spells them, sorted


CANDIDATES = 16  # nearest older memories of the project looked at (the most similar wins)


def find_superseded(rows: Rows, vectors: VectorIndex, config: MemoryConfig, *, project: str, author: str,
                    editors: dict[str, list[str]], created: float, content: str, vecs: np.ndarray,
                    load_content: Callable[[str], str]) -> Superseded | None:
    """The older memory a new one (`content`, embedded as `vecs`, by `author` in `project`) restates, if any: a
    live, not yet superseded memory of the same project, created before `created`, that `author` may change
    (own, or granted by `editors`; never a bootstrap entry nor a consolidated memory), with cosine >=
    supersede_min_similarity and at least supersede_min_shared_terms subject terms in common, and only when the
    new text says that something changed (restatement.says_change: "now", "moved", "instead"...): a still-true
    memory about the same subject is as close as a restatement, and a stored link hides the older one from
    briefings (measured on bench_lifecycle's held-out facts: 6 of 40 links were sibling -> older statement
    without it, none with it). The most similar one wins, unless another older memory of the project is nearly as close (_in_family: a recurring note shape,
    not a restatement). The caller holds the write lock; near duplicates were turned away before."""
    code = rows.projects.code.get(project)
    if code is None or vectors.live == 0 or len(vecs) == 0 or not says_change(content):
        return None
    mask = rows.alive[: len(rows)] & (rows.project[: len(rows)] == code) & (rows.created[: len(rows)] < created)
    candidates = nearest_rows(rows, vectors, config, mask, vecs, CANDIDATES)
    min_sim, min_terms = config.supersede_min_similarity, config.supersede_min_shared_terms
    successor_of, at_row = rows.successor_of, rows.at_row
    # Memories this one could replace: live, the author's own or granted, neither bootstrap nor consolidated.
    # Superseded ones are never replaced again but still count as look-alikes: twenty "fact N" notes stored one
    # by one would otherwise chain, each linking the one before (the previous link hid the family).
    ranked = []
    for row, sim in sorted(candidates.items(), key=lambda kv: -kv[1]):
        head = at_row[row]
        if (sim >= min_sim - FAMILY_MARGIN and head is not None
                and head.type not in BOOTSTRAP_TYPES and head.type != CONSOLIDATED_TYPE
                and may_edit(editors, author, head.author)):
            ranked.append((head, sim))
    new_terms: set[str] | None = None
    for n, (head, sim) in enumerate(ranked):
        if sim < min_sim:
            break
        if head.id in successor_of:
            continue
        if new_terms is None:
            new_terms = subject_terms(content)
        shared = new_terms & subject_terms(load_content(head.id))
        if len(shared) >= min_terms:
            if _in_family(ranked, n):
                return None
            return Superseded(head.id, round(float(sim), 4), words_of(content, shared))
    return None


def _in_family(ranked: list[tuple[Head, float]], n: int) -> bool:
    """Is candidate `n` of `ranked` (most similar first) one of a family: is another candidate within
    FAMILY_MARGIN of its similarity? A restatement has one clear predecessor; a recurring note shape (incident logs, bug tickets,
    trip notes) has many look-alikes, and linking the newest to one of them would rank a still-true event below
    an unrelated one. Measured on bench_lifecycle: about half the false links go, at the same recall. Those are
    left to the query-time rule (restated), which a query narrows."""
    sim = ranked[n][1]
    return any(other >= sim - FAMILY_MARGIN for k, (_, other) in enumerate(ranked) if k != n)
