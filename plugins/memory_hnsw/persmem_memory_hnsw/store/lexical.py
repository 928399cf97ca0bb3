"""BM25 (Okapi) over an incremental inverted index with numpy postings.

Terms are case-folded word tokens, English stop words removed, Snowball-
stemmed (PyStemmer), so "painting" finds "paints". Postings are kept in one
compact block plus a small delta (see BM25Index); a deleted or replaced
document is masked out (document frequencies count live documents only)
and its postings go when the collection reopens after a compaction.
Scoring a query is a handful of vectorised numpy operations per query term.

Statistics by scope: every document belongs to one scope (its author's code, store/rows.py), and the index keeps, per
scope, how many live documents it holds and their total length. A search that may see only one scope (an
agent in a private collection such as `sessions`, which sees its own turns only) scores with that scope's
document frequencies, count and average length alone: its scores are the same whatever other agents' private
documents say, so they cannot be used to test guesses about words in them. A search over everything (a shared
collection, where every row is visible to everyone) uses the statistics of every live document, as before.

A document may carry context: words of its neighbours (the chunks before
and after it in one memory_bulk_store call) counted at CONTEXT_WEIGHT of a
word of its own, so a short turn like "Yes, a sunrise." is found by the
words of the question it answers. On LoCoMo dialogs (one memory per turn)
300 characters of context each side raised R@10 0.684 -> 0.774. A long
document stands on its own: past CONTEXT_FULL_TERMS terms of its own its
context counts less and less (whole LoCoMo sessions lost 0.002-0.003 R@10
to their neighbours' words). The question a chunk replies to (`reply_to`,
store/contexts.py) is counted once more at REPLY_WEIGHT, so its words weigh as
much as the chunk's own.
"""

from __future__ import annotations

import math
import re
from array import array
from collections import Counter

import numpy as np

# Anserini's BM25 defaults; memories are short, so a weaker length normalisation than the textbook 1.2/0.75
# (LoCoMo dialog R@10 0.632 -> 0.685 together with min-max fusion, session level unchanged).
K1 = 0.9
B = 0.4
# A context word counts a third of a word of the document's own. 0.35-0.75 found alike on LoCoMo dialogs; with
# the question a turn replies to counted in full (REPLY_WEIGHT), 0.35 finds as many turns as 0.5 and spreads
# them over more conversations (the sessions of the top 10: 0.907 -> 0.911).
CONTEXT_WEIGHT = 0.35
CONTEXT_FULL_TERMS = 100  # own terms up to which the context counts in full; beyond, in proportion
REPLY_WEIGHT = 1.0 - CONTEXT_WEIGHT  # the question a chunk replies to, on top of its place in the context
WORD_RE = re.compile(r"\w+", re.UNICODE)

STOP_WORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before being below between both
    but by can could did do does doing down during each few for from further had has have having he her here hers
    herself him himself his how i if in into is it its itself just me more most my myself no nor not now of off on
    once only or other our ours ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were what when where which
    while who whom why will with would you your yours yourself yourselves s t don didn doesn isn wasn weren won
    wouldn shouldn couldn hasn haven hadn aren ll re ve d m o y""".split()
)


class Analyzer:
    def __init__(self):
        import Stemmer

        self._stemmer = Stemmer.Stemmer("english")
        self._cache: dict[str, str] = {}

    def terms(self, text: str) -> list[str]:
        words = [w for w in WORD_RE.findall(text.casefold()) if w not in STOP_WORDS and len(w) < 64]
        cache = self._cache
        missing = [w for w in set(words) if w not in cache]
        if missing:
            if len(cache) > 500_000:
                cache.clear()
            for word, stem in zip(missing, self._stemmer.stemWords(missing), strict=True):
                cache[word] = stem
        return [cache[w] for w in words]


class BM25Index:
    """Postings live in one compact block (CSR: every term's rows and term frequencies, back to back, found
    through an offsets array) plus a small append-only delta of recent additions, merged into the block when
    it grows. A store with 100,000 memories has ~100,000 distinct terms (numbers, names, ids): two Python
    arrays per term cost ~20 MB and 200,000 objects for the cyclic collector to walk; the block costs ~13 MB
    and three objects."""

    # Postings in the delta before it is merged into the block: at least MERGE_AT, and at least a quarter of the
    # block, so that a merge (which rewrites the whole block: ~2 s at 1M memories) costs the same per posting
    # added at any size, instead of one every ~8,000 memories.
    MERGE_AT = 200_000
    MERGE_SHARE = 4

    def __init__(self):
        self.analyzer = Analyzer()
        self._term_id: dict[str, int] = {}
        self._offsets = np.zeros(1, dtype=np.int64)  # block: term t's postings are [offsets[t], offsets[t+1])
        self._rows = np.zeros(0, dtype=np.int32)
        self._tfs = np.zeros(0, dtype=np.float32)
        self._delta: dict[int, tuple[array, array]] = {}
        self._delta_size = 0
        self._doc_len = array("f")
        self._alive = bytearray()
        self.n_alive = 0
        self.total_len = 0.0
        self._scope = array("i")  # per row: the scope whose statistics it counts in (its author's code)
        self.scope_alive: dict[int, int] = {}  # scope -> live documents in it
        self.scope_len: dict[int, float] = {}  # scope -> their total length

    def add(self, row: int, text: str, context: str = "", reply_to: str = "", scope: int = 0) -> None:
        terms = self.analyzer.terms(text)
        counts: dict[str, float] = Counter(terms)
        length = float(len(terms))
        context_weight = CONTEXT_WEIGHT * min(1.0, CONTEXT_FULL_TERMS / max(len(terms), 1))
        for extra, weight in ((context, context_weight), (reply_to, REPLY_WEIGHT)):
            if not extra:
                continue
            around = self.analyzer.terms(extra)
            for term, tf in Counter(around).items():
                counts[term] = counts.get(term, 0) + weight * tf
            length += weight * len(around)
        if len(self._doc_len) <= row:
            grow = row + 1 - len(self._doc_len)
            self._doc_len.extend(array("f", bytes(4 * grow)))
            self._alive.extend(bytes(grow))
            self._scope.extend(array("i", bytes(4 * grow)))
        term_id, delta = self._term_id, self._delta
        for term, tf in counts.items():
            tid = term_id.setdefault(term, len(term_id))
            postings = delta.get(tid)
            if postings is None:
                postings = delta[tid] = (array("i"), array("f"))
            postings[0].append(row)
            postings[1].append(tf)
        self._delta_size += len(counts)
        self._doc_len[row] = length
        self._alive[row] = 1
        self.n_alive += 1
        self.total_len += length
        self._scope[row] = scope
        self.scope_alive[scope] = self.scope_alive.get(scope, 0) + 1
        self.scope_len[scope] = self.scope_len.get(scope, 0.0) + length
        if self._delta_size >= max(self.MERGE_AT, len(self._rows) // self.MERGE_SHARE):
            self.merge()

    def merge(self) -> None:
        """Fold the delta into the block (a stable sort by term keeps each term's rows in insertion order)."""
        if not self._delta:
            return
        n_terms = len(self._term_id)
        old_counts = np.diff(self._offsets)
        old_ids = np.repeat(np.arange(len(old_counts), dtype=np.int64), old_counts)
        ids = [old_ids]
        rows, tfs = [self._rows], [self._tfs]
        for tid, (r, t) in self._delta.items():
            ids.append(np.full(len(r), tid, dtype=np.int64))
            rows.append(np.frombuffer(r, dtype=np.int32))
            tfs.append(np.frombuffer(t, dtype=np.float32))
        ids = np.concatenate(ids)
        order = np.argsort(ids, kind="stable")
        self._rows = np.concatenate(rows)[order]
        self._tfs = np.concatenate(tfs)[order]
        self._offsets = np.zeros(n_terms + 1, dtype=np.int64)
        np.cumsum(np.bincount(ids, minlength=n_terms), out=self._offsets[1:])
        self._delta = {}
        self._delta_size = 0

    def _postings(self, tid: int) -> tuple[np.ndarray, np.ndarray]:
        rows = tfs = None
        if tid + 1 < len(self._offsets):
            a, b = self._offsets[tid], self._offsets[tid + 1]
            rows, tfs = self._rows[a:b], self._tfs[a:b]
        extra = self._delta.get(tid)
        if extra is not None:
            more_rows, more_tfs = np.frombuffer(extra[0], dtype=np.int32), np.frombuffer(extra[1], dtype=np.float32)
            if rows is None or len(rows) == 0:
                return more_rows, more_tfs
            return np.concatenate([rows, more_rows]), np.concatenate([tfs, more_tfs])
        return rows, tfs

    def rows_with(self, term: str) -> np.ndarray:
        """The rows whose postings hold `term` (an analysed term), live or not; empty if none."""
        tid = self._term_id.get(term)
        if tid is None:
            return np.zeros(0, dtype=np.int32)
        return self._postings(tid)[0]

    def remove(self, row: int) -> None:
        if row < len(self._alive) and self._alive[row]:
            self._alive[row] = 0
            self.n_alive -= 1
            self.total_len -= self._doc_len[row]
            scope = self._scope[row]
            self.scope_alive[scope] -= 1
            self.scope_len[scope] -= self._doc_len[row]
            if not self.scope_alive[scope]:  # no float residue left behind for the next document of the scope
                del self.scope_alive[scope], self.scope_len[scope]

    def scores(self, query: str, n_rows: int, scope: int | None = None) -> tuple[np.ndarray, np.ndarray] | None:
        """(rows, BM25 scores) of the live rows below `n_rows` that hold a query term, in no order; None if no
        query term is indexed. Only the postings are touched, never an array of every row: a search at 100,000
        memories scores the few thousand that share its words. With `scope`, only that scope's rows are scored,
        with statistics (document frequencies, count, average length) of that scope's live rows alone."""
        ids = {self._term_id[t] for t in self.analyzer.terms(query) if t in self._term_id}
        n_alive, total_len = ((self.n_alive, self.total_len) if scope is None else
                              (self.scope_alive.get(scope, 0), self.scope_len.get(scope, 0.0)))
        if not ids or n_alive == 0:
            return None
        doc_len = np.frombuffer(self._doc_len, dtype=np.float32)
        avgdl = max(total_len / n_alive, 1.0)
        alive = np.frombuffer(self._alive, dtype=np.uint8).view(bool)
        scopes = None if scope is None else np.frombuffer(self._scope, dtype=np.int32)
        found, parts = [], []
        for tid in ids:
            rows, tfs = self._postings(tid)
            live = alive[rows]  # postings of deleted (or replaced) rows stay until a reload
            if scopes is not None:
                live &= scopes[rows] == scope
            df = int(np.count_nonzero(live))
            if df == 0:
                continue
            idf = math.log(1.0 + (n_alive - df + 0.5) / (df + 0.5))
            keep = live & (rows < n_rows)
            rows, tfs = rows[keep], tfs[keep]
            norm = K1 * (1.0 - B + B * doc_len[rows] / avgdl)
            found.append(rows)
            parts.append(idf * tfs * (K1 + 1.0) / (tfs + norm))
        if not found:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32)
        if len(found) == 1:
            return found[0], parts[0].astype(np.float32)
        rows, at = np.unique(np.concatenate(found), return_inverse=True)
        return rows, np.bincount(at, weights=np.concatenate(parts)).astype(np.float32)
