"""What a new memory may restate: the few older memories of its project it most likely replaces. memory_store's
reply names them (`may_replace`, so the calling assistant, who knows, can link them); a search ranks them just
below the new one when it finds both and the new one answers nearly as well (search/weighing.restated); a
session's briefing and a prompt's recall show the new one instead of them. Nothing is stored: no link is made
unless the assistant makes it (supersedes=, or the store-time detection when sure: supersession.py).

How (deterministic, no LLM; benchmarks/bench_lifecycle.py measures it):
- candidates are the author's older live memories of the same project (or ones the author may edit), closest
  in meaning first (best chunk against best chunk); never bootstrap entries or consolidated memories (a reply
  leaves out those a stored link already supersedes);
- the closest must reach `[memory] restated_min_similarity` and stand out: its cosine minus the mean of the
  next LEAD_OVER closest must reach `restated_min_lead`, or `restated_min_lead_changed` when the new text says
  that something changed (in a project of fewer memories the lead says little: a word of change is needed) ("now", "moved", "instead", "no longer", "switched", "replaced", "since"...:
  CHANGE_RE). Restatements are often not close in meaning with a small embedder (cosine 0.4-0.8 on the
  benchmark, overlapping the closest unrelated memory of a busy project), but the memory a fact restates is
  closer than the rest of its project by a margin a new fact's nearest neighbour rarely has; the words of
  change are what a person uses to tell an update from a new fact;
- the reply lists up to HINTS candidates within HINT_MARGIN of the closest; a search and a briefing act only on
  the closest, and only when no other is within RANK_MARGIN of it (a restatement has one clear predecessor;
  when a sibling about the same subject is as close, the assistant decides).
- conversation and document pieces (a memory_bulk_store call with context_chars > 0, session turns) are
  neither side: one line of a conversation does not restate another speaker's line.

`Restatements` keeps each memory's list once worked out (made at store time for memory_store, else on first
use), checked against the versions it was made from.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from ..config import MemoryConfig
from ..permissions import BOOTSTRAP_TYPES
from ..search.ranking import nearest_rows
from ..search.weighing import CONSOLIDATED_TYPE

if TYPE_CHECKING:
    from ..store.records import Head
    from ..store.rows import Rows
    from ..store.vectors import VectorIndex

HINTS = 3  # memories a store reply names at most
HINT_MARGIN = 0.2  # ... each within this cosine of the closest one
RANK_MARGIN = 0.05  # a search ranks the closest below the new memory only when no other is within this of it
NEAREST = 16  # older memories of the project looked at
LEAD_OVER = 8  # the closest one's lead is over the mean similarity of the next this many
TYPICAL_UNRELATED = 0.25  # cosine of unrelated texts with the default model: stands in for missing ones

# Words people use to say a fact changed. Matched on whole words, case-insensitively.
CHANGE_RE = re.compile(
    r"\b(now|nowadays|these days|currently|no longer|not any ?more|any ?more|instead|rather than|moved|moving|"
    r"migrat\w*|switch\w*|replac\w*|chang\w*|upgrad\w*|downgrad\w*|updat\w*|bump\w*|rais\w*|lower\w*|increas\w*|"
    r"decreas\w*|reduc\w*|relocat\w*|renam\w*|renumber\w*|rotat\w*|rebuil\w*|revers\w*|dropp\w*|deprecat\w*|"
    r"retir\w*|gone|remov\w*|since|from now on|going forward|as of|starting|back to|stopp\w*|ended|became|"
    r"become|took over|taken over|handed over|new|latest|cancel\w*|revert\w*|over to|from \w+ on)\b",
    re.IGNORECASE)


class Candidate(NamedTuple):
    id: str
    similarity: float  # cosine, best chunk against best chunk


def says_change(text: str) -> bool:
    """Whether `text` uses a word people use to say that a fact changed (CHANGE_RE)."""
    return CHANGE_RE.search(text) is not None


def may_be_replaced(head: Head, now: float | None = None) -> bool:
    """Whether a memory can be taken as restated by a later one: not a bootstrap entry (its author's voice),
    not a consolidated memory, not expired at `now` (None: not asked). (One a stored link supersedes still
    counts: the closest is the closest.)"""
    return (head.type not in BOOTSTRAP_TYPES and head.type != CONSOLIDATED_TYPE
            and not (now is not None and head.valid_until and head.valid_until <= now))


def candidates(rows: Rows, vectors: VectorIndex, config: MemoryConfig, *, project: str, content: str,
               vecs: np.ndarray, before: float | None, exclude_row: int | None = None,
               allowed: Callable[[Head], bool] = lambda head: True) -> list[Candidate]:
    """The older memories (created before `before`; None: all) of `project` that a memory with `content`,
    embedded as `vecs`, most likely restates: at most HINTS, closest first, each within HINT_MARGIN of the
    closest, none unless the closest passes the bar (module docstring). `allowed`: which heads may be named
    (the author's own, or granted). The caller holds the collection's lock."""
    code = rows.projects.code.get(project)
    if code is None or vectors.live == 0 or len(vecs) == 0:
        return []
    n = len(rows)
    mask = rows.alive[:n] & (rows.project[:n] == code)
    if before is not None:
        mask &= rows.created[:n] < before
    if exclude_row is not None and exclude_row < n:
        mask[exclude_row] = False
    if not mask.any():
        return []
    near = nearest_rows(rows, vectors, config, mask, vecs, NEAREST)
    at_row, now = rows.at_row, time.time()
    eligible = [(at_row[row].id, sim) for row, sim in sorted(near.items(), key=lambda kv: -kv[1])
                if at_row[row] is not None and may_be_replaced(at_row[row], now) and allowed(at_row[row])]
    if not eligible:
        return []
    best = eligible[0][1]
    floor = config.restated_min_similarity
    if best < floor:
        return []
    others = sorted(near.values(), reverse=True)[1:1 + LEAD_OVER]
    few = len(others) < LEAD_OVER  # a project of few memories: the lead says little, a word of change must
    others += [TYPICAL_UNRELATED] * (LEAD_OVER - len(others))  # (measured against unrelated text meanwhile)
    lead = best - sum(others) / LEAD_OVER
    changed = lead >= config.restated_min_lead_changed and says_change(content)
    if not changed and (few or lead < config.restated_min_lead):
        return []
    return [Candidate(memory_id, round(float(sim), 4)) for memory_id, sim in eligible[:HINTS]
            if sim >= max(floor, best - HINT_MARGIN)]


def closest(found: list[Candidate]) -> tuple[str, ...]:
    """The candidate a search and a briefing act on: the closest one, when no other is within RANK_MARGIN of
    it. Two as close (the older statement and a still-true sibling about the same subject, often) leave the
    choice to the assistant, who is shown both: acting on both cost siblings their first place (bench_lifecycle:
    0.75 of sibling questions answered first instead of 0.91) for no gain on the held-out facts."""
    if not found or (len(found) > 1 and found[1].similarity >= found[0].similarity - RANK_MARGIN):
        return ()
    return (found[0].id,)


class Restatements:
    """Each memory's closest restated candidates (`closest`), worked out once: at store time for a memory_store,
    else the first time a search or a briefing asks. An entry holds the versions it was made from (the memory's
    and each candidate's update time), so an edit on either side makes it anew; a memory stored later with an
    earlier `created` (an import) is seen once the entry is made anew (a restart)."""

    def __init__(self):
        self._known: dict[str, tuple[float, tuple[tuple[str, float], ...]]] = {}
        self._later: dict[str, set[str]] = {}  # older id -> the ids whose known lists name it

    def remember(self, head_id: str, updated: float, ids: tuple[str, ...], updated_of: Callable[[str], float],
                 changed: bool):
        """`head_id`'s list (`ids`); `changed`: its text says something changed (says_change), so a search
        may also raise it to what the memories it restates score (`later`)."""
        before = self._known.get(head_id)
        for old in before[1] if before else ():
            self._later.get(old[0], set()).discard(head_id)
        self._known[head_id] = (updated, tuple((i, updated_of(i)) for i in ids))
        for i in ids if changed else ():
            self._later.setdefault(i, set()).add(head_id)

    def later(self, head_id: str) -> tuple[str, ...]:
        """The memories known to restate `head_id` and to say that something changed (their lists made: at
        their store, or on use since the collection opened): a search raises them to what it scored, as a
        successor inherits. (Without a word of change, a later memory of the same subject is as often a
        still-true sibling: it is ranked above the older one only when the query finds both.)"""
        found = self._later.get(head_id)
        return tuple(found) if found else ()

    def below(self, head: Head, rows: Rows, work_out: Callable[[Head], tuple[tuple[str, ...], bool]]
              ) -> tuple[str, ...]:
        """The ids `head` ranks above as their restatement (work_out(head) when not known or out of date).
        The caller holds the collection's lock."""
        known = self._known.get(head.id)
        if known is not None and known[0] == head.updated and all(
                (h := rows.heads.get(i)) is not None and h.updated == at for i, at in known[1]):
            return tuple(i for i, _ in known[1])
        ids, changed = work_out(head)
        if head.id not in rows.unembedded:  # (its list is made once its vectors are there)
            self.remember(head.id, head.updated, ids, lambda i: rows.heads[i].updated, changed)
        return ids

    def forget(self, head_id: str) -> None:
        self._known.pop(head_id, None)


def worked_out(c, head: Head) -> tuple[tuple[str, ...], bool]:
    """`closest` for a stored memory of collection `c` (its own author's older memories only), and whether
    its text says something changed: none for a conversation or document piece (it has context), or while it
    waits for the embedder. Lock held."""
    rows = c.rows
    row = rows.row_of.get(head.id)
    if row is None or head.id in rows.unembedded or not head.n_labels or not may_be_replaced(head):
        return (), False  # (nor does a bootstrap entry or a consolidated memory restate anything)
    memory = c.memory_of(head.id)
    if memory.context or memory.reply_to:
        return (), False
    vecs = _vectors_of(c, head)
    found = candidates(rows, c.vectors, c.config, project=head.project, content=memory.content, vecs=vecs,
                       before=head.created, exclude_row=row, allowed=lambda other: other.author == head.author)
    return closest(found), says_change(memory.content)


def replaced_by(c, head: Head) -> Head | None:
    """The later memory of collection `c` that restates `head` (whose `worked_out` list names it): by the same
    author, in the same project, the closest such first; None when there is none. Lock held."""
    rows = c.rows
    if head.id not in rows.row_of or head.id in rows.unembedded or not head.n_labels:
        return None
    n = len(rows)
    mask = (rows.alive[:n] & (rows.project[:n] == rows.projects.code[head.project])
            & (rows.author[:n] == rows.authors.code[head.author]) & (rows.created[:n] > head.created))
    if not mask.any():
        return None
    near = nearest_rows(rows, c.vectors, c.config, mask, _vectors_of(c, head), NEAREST)
    for row, sim in sorted(near.items(), key=lambda kv: -kv[1]):
        if sim < c.config.restated_min_similarity:
            break
        later = rows.at_row[row]
        if later is not None and head.id in c.restates(later):
            return later
    return None


def _vectors_of(c, head: Head) -> np.ndarray:
    """A stored memory's vectors, as the index holds them (int8 copies)."""
    return c.vectors.vectors_of(np.arange(head.first_label, head.first_label + head.n_labels))
