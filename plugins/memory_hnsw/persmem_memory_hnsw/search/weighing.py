"""Memory that stays true: how links, feedback, use, tiers and staleness weigh in a search, and how a new memory
is ranked below a later one that restates it at query time (`restated`); lifecycle/supersession.py recognises a
restatement when a memory is stored. Deterministic, no LLM.

- Tiers: episodic (a private collection's captured session turns), procedural (identity, directives,
  preferences, procedures), semantic (everything else, consolidated memories included). Each tier has a score
  factor ([memory] tier_weights); recency weighting never ages a procedural memory.
- A superseded memory (rows.successor_of) scores x superseded_weight, or is hidden; a consolidated memory's
  member x consolidated_member_weight; an expired one (valid_until passed) is hidden unless asked for.
- Heirs inherit relevance: a successor (and each later one along the chain) scores at least what the memory it
  supersedes scored before the factors, and a consolidated memory at least what its best member scored; so
  the current statement ranks above the one it replaced even when the query's words are those of the old one
  (restatements use other words: "we moved staging to SQLite" vs "staging uses PostgreSQL"), and is found
  when only the old one matched. An heir the search's filters exclude inherits nothing.
- Feedback: 1 + feedback_weight * (2 * confidence - 1), confidence over each agent's latest verdict only
  (records.confidence), so the factor stays in [1 - w, 1 + w] and one agent moves it by at most w / 3.
- Use: 1 + retrieval_weight * min(1, log1p(count) / log1p(100)).

Every factor is a dict or attribute lookup per candidate: `adjust` costs O(candidates), never O(collection).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from ..config import MemoryConfig
from ..store.records import confidence, expired, review_due  # noqa: F401  (part of this module's interface)

if TYPE_CHECKING:
    from collections.abc import Callable

    from ..store.records import Head
    from ..store.rows import Rows

PROCEDURAL_TYPES = frozenset({"identity", "directive", "preference", "procedure"})
CONSOLIDATED_TYPE = "consolidated"
RECENCY_DAYS = 30.0  # recency weighting's time constant: a memory's weight falls by 1/e per 30 days of age
RETRIEVALS_FOR_FULL_WEIGHT = 100  # retrievals at which the use factor reaches 1 + retrieval_weight


def tier(head_type: str, private: bool) -> str:
    """"episodic" (private collection: captured session turns), "procedural" (PROCEDURAL_TYPES) or "semantic"."""
    if private:
        return "episodic"
    return "procedural" if head_type in PROCEDURAL_TYPES else "semantic"


@dataclass
class LifecycleView:
    """What a search needs to weigh lifecycle state: the time, the caller's options, the collection's kind."""

    config: MemoryConfig
    now: float
    include_superseded: bool = True
    include_expired: bool = False
    recency_weight: float = 0.0
    private: bool = False
    usage: dict[str, tuple[int, float, int]] = field(default_factory=dict)  # id -> (retrievals by others, last at, all)
    restates: Callable[[Head], tuple[str, ...]] | None = None  # the ids a memory restates (lifecycle/restatement.py)
    restated_later: Callable[[str], tuple[str, ...]] | None = None  # the known memories restating an id


def feedback_factor(conf: float, weight: float) -> float:
    return 1.0 + weight * (2.0 * conf - 1.0)


def retrieval_factor(count: int, weight: float) -> float:
    return 1.0 + weight * min(1.0, math.log1p(count) / math.log1p(RETRIEVALS_FOR_FULL_WEIGHT))


def adjust(scores: dict[int, float], rows: Rows, view: LifecycleView,
           allowed: np.ndarray | None = None) -> dict[int, float]:
    """The fused `scores` (row -> score), heirs raised to what they inherit, times each row's lifecycle
    factors, without the rows the options hide (superseded ones unless include_superseded, expired ones unless
    include_expired) and dead rows. `allowed`: the search's filter mask over rows (None: no filter); an heir
    outside it is not added."""
    config, now = view.config, view.now
    successor_of, consolidated_into, usage = rows.successor_of, rows.consolidated_into, view.usage
    weight_of = config.tier_weights.get
    episodic = view.private
    recency = view.recency_weight
    superseded_weight, member_weight = config.superseded_weight, config.consolidated_member_weight
    feedback_weight, retrieval_weight = config.feedback_weight, config.retrieval_weight
    per_log_retrieval = retrieval_weight / math.log1p(RETRIEVALS_FOR_FULL_WEIGHT)
    log1p, exp = math.log1p, math.exp
    scores = _inherited(scores, rows, view, allowed)
    out: dict[int, float] = {}
    for row, score in scores.items():
        head = rows.at_row[row]
        if head is None:
            continue
        if head.valid_until and head.valid_until <= now and not view.include_expired:
            continue
        factor = 1.0
        if head.id in successor_of:
            if not view.include_superseded:
                continue
            factor = superseded_weight
        if head.id in consolidated_into:
            factor *= member_weight
        if head.confidence != 0.5:
            factor *= 1.0 + feedback_weight * (2.0 * head.confidence - 1.0)  # feedback_factor, inlined
        used = usage.get(head.id)
        if used is not None:
            factor *= 1.0 + min(retrieval_weight, per_log_retrieval * log1p(used[0]))  # retrieval_factor
        kind = "episodic" if episodic else ("procedural" if head.type in PROCEDURAL_TYPES else "semantic")  # tier()
        factor *= weight_of(kind, 1.0)
        if recency > 0 and kind != "procedural":  # who one is and how one works does not age
            age_days = max(0.0, (now - head.created) / 86400.0)
            factor *= (1.0 - recency) + recency * exp(-age_days / RECENCY_DAYS)
        out[row] = score * factor
    return out


RESTATED_WINDOW = 2  # the later-statement rule looks at the best top_k * this results of a search
RESTATED_MARGIN = 1e-3  # an older restated result ends this fraction below the later one


def restated(scores: dict[int, float], rows: Rows, view: LifecycleView, top_k: int
             ) -> tuple[dict[int, float], dict[int, int]]:
    """The later statement wins, at query time: among the best top_k * RESTATED_WINDOW of `scores` (after
    `adjust`), an older result ranks just below a later one of the same project and author that restates it
    (view.restates: lifecycle/restatement.py, the memories its store reply named as possibly replaced, closest
    ones only) when the later one answers the query at least restated_min_score_ratio as well. Neither may be in
    a private collection (session turns), nor a bootstrap entry, consolidated or already superseded (a stored
    link ranks those). Returns (`scores` with those older rows lowered, older row -> the later row it now ranks
    below). Only a row the rule moved is returned as yielding (its mark explains the move).

    A bounded swap, not a burial: the older one drops just below the later one, and a still-true older memory
    asked about in its own words keeps its place when the later one answers the query much worse (the ratio)."""
    ratio, restates = view.config.restated_min_score_ratio, view.restates
    if view.private or restates is None or view.config.restated_min_similarity >= 1.0 or len(scores) < 2:
        return scores, {}
    at_row, undone = rows.at_row, rows.undone_links
    window = sorted(scores.items(), key=lambda kv: kv[1], reverse=True)[: top_k * RESTATED_WINDOW]
    groups: dict[tuple[int, int], list[int]] = {}
    for row, _ in window:
        if at_row[row] is not None:
            groups.setdefault((int(rows.project[row]), int(rows.author[row])), []).append(row)
    lowered: dict[int, float] = {}
    yields_to: dict[int, int] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        created = rows.created[members]
        if created.min() == created.max():
            continue
        order = np.argsort(-created, kind="stable").tolist()  # newest first: a later row's final score is known
        replaces = {members[j]: restates(at_row[members[j]]) for j in order[:-1]}
        final: dict[int, float] = {}
        for i in order:
            older = members[i]
            score = cap = scores[older]
            older_id = at_row[older].id
            for newer, ids in replaces.items():
                if (newer == older or older_id not in ids or scores[newer] < ratio * score
                        or older_id in undone.get(at_row[newer].id, ())):  # (a link between them was undone)
                    continue
                below = final[newer] * (1.0 - RESTATED_MARGIN)
                if below < cap:  # it ranked above this later statement: it now yields to it
                    cap = below
                    lowered[older], yields_to[older] = cap, newer
            final[older] = cap
    if not lowered:
        return scores, {}
    return {**scores, **lowered}, yields_to


MAX_CHAIN = 16  # links followed from a superseded memory to its latest successor (a guard: chains are short)


def _inherited(scores: dict[int, float], rows: Rows, view: LifecycleView,
               allowed: np.ndarray | None) -> dict[int, float]:
    """`scores` with every heir raised to at least the score of the memory it inherits from; heirs not among the
    candidates are added (within the search's filters, `allowed`). Heirs: the successors along the supersedes
    chain, the consolidated memory, and each known later restatement by the same author that says something
    changed (view.restated_later; not in a private collection): the current statement is found when only the
    older one's words match the query, and `restated` then ranks the older one just below it."""
    successor_of, consolidated_into = rows.successor_of, rows.consolidated_into
    restated_later = view.restated_later
    if view.private or view.config.restated_min_similarity >= 1.0:
        restated_later = None
    if not successor_of and not consolidated_into and restated_later is None:
        return scores
    at_row, row_of = rows.at_row, rows.row_of
    out = dict(scores)
    for row, score in scores.items():
        head = at_row[row]
        if head is None:
            continue
        heir, steps = successor_of.get(head.id), 0
        while heir is not None and steps < MAX_CHAIN:
            if not _raise(out, row_of.get(heir), score, allowed):
                break
            heir, steps = successor_of.get(heir), steps + 1
        consolidated = consolidated_into.get(head.id)
        if consolidated is not None:
            _raise(out, row_of.get(consolidated), score, allowed)
        for later_id in restated_later(head.id) if restated_later is not None else ():
            later_row = row_of.get(later_id)
            if later_row is not None and rows.author[later_row] == rows.author[row]:
                _raise(out, later_row, score, allowed)
    return out


def _raise(scores: dict[int, float], row: int | None, score: float, allowed: np.ndarray | None) -> bool:
    if row is None or (allowed is not None and (row >= len(allowed) or not allowed[row])):
        return False
    if scores.get(row, -1.0) < score:
        scores[row] = score
    return True


FAMILY_MARGIN = 0.1  # another look-alike this close to the best one's similarity: a recurring note shape
