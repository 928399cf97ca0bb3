"""What a collection keeps in memory of its live memories, one row each: the heads, numpy columns for
filters and exact scoring, tag sets, which row each vector label belongs to, where each row's entry is in the
log, and the BM25 postings.

Rows are never reused: a new version of a memory takes a new row and its old row dies (alive = False). All of
it is derived from the log and rebuilt from it on open; the collection's lock guards it.

Lifecycle links are stored on one side only (a newer memory's `supersedes`, a consolidated memory's
`consolidates`); the other side (`successor_of`, `consolidated_into`) is derived here from the live memories'
heads, whatever order they were put in, so it always equals what a fresh replay of the log gives. A link
counts only if the memory holding it was created no earlier than the live memory it names: a link to an id
that was deleted never reaches a later memory stored under that id (another agent's identity entry, say).
"""

from __future__ import annotations

import numpy as np

from .contexts import is_question
from .heap import grown
from .lexical import BM25Index
from .query import Filters
from .records import Head, Memory, expired, head_of


class Codes:
    """Small integer codes for repeated strings (projects, types, authors), for numpy filters."""

    def __init__(self):
        self.code: dict[str, int] = {}

    def get(self, value: str) -> int:
        if value not in self.code:
            self.code[value] = len(self.code)
        return self.code[value]


class Rows:
    def __init__(self):
        self.heads: dict[str, Head] = {}  # live memories' heads by id; texts and histories stay in the log
        self.by_hash: dict[int, str] = {}  # dedup_key(project, author, content hash) -> id
        self.row_of: dict[str, int] = {}
        self.at_row: list[Head | None] = []  # None: a dead row
        self.tag_rows: dict[str, set[int]] = {}
        self.label_row = np.full(0, -1, dtype=np.int32)  # vector label -> row (-1: none)
        self.next_label = 0  # the first vector label never used
        self.applied_seq = 0  # on a cluster: the memory stream's last sequence applied here (cluster/replication.py)
        self.lexical = BM25Index()
        # Live memories whose latest log entry holds no vectors yet: acknowledged once logged, embedded later by the
        # service's background embedder (embedding/background.py). Found by keyword meanwhile; a replay queues them again.
        self.unembedded: set[str] = set()
        # The derived side of the links: older id -> the live memory, created latest, whose `supersedes` names
        # it; member id -> the latest live consolidated memory whose `consolidates` names it. A linked id need
        # not be live itself (it may have been deleted since); when a memory of that id is live, only linkers
        # created no earlier than it count (`_counts`).
        self.successor_of: dict[str, str] = {}
        self.consolidated_into: dict[str, str] = {}
        self._successors: dict[str, set[str]] = {}  # older id -> every live memory that supersedes it
        self._consolidators: dict[str, set[str]] = {}  # member id -> every live memory that consolidates it
        # Newer id -> the older ids whose supersession link it undid (memory_unlink) and has not made again: the
        # query-time rule (lifecycle.restated) never ranks such a pair by time again, as it was judged wrong.
        self.undone_links: dict[str, frozenset[str]] = {}
        self.projects, self.types, self.authors = Codes(), Codes(), Codes()
        self._strings: dict[str, str] = {}  # one copy of each project, type, author and tag
        # One entry per row, each column contiguous (a filter reads only the columns it needs):
        self.project = np.zeros(0, dtype=np.int32)  # codes in self.projects
        self.type = np.zeros(0, dtype=np.int32)  # codes in self.types
        self.author = np.zeros(0, dtype=np.int32)  # codes in self.authors
        self.created = np.zeros(0, dtype=np.float64)
        self.alive = np.zeros(0, dtype=bool)
        self.question = np.zeros(0, dtype=bool)  # its text is a question (contexts.is_question): ranks lower
        self.first_label = np.zeros(0, dtype=np.int64)  # a row's labels are first_label .. + label_count - 1
        self.label_count = np.zeros(0, dtype=np.int32)
        self.log_start = np.zeros(0, dtype=np.int64)  # where a row's log entry is: log_start .. log_end
        self.log_end = np.zeros(0, dtype=np.int64)

    def __len__(self) -> int:
        """The number of rows, dead ones included (row numbers run 0 .. len - 1)."""
        return len(self.at_row)

    def _grow(self, need: int) -> None:
        self.project = grown(self.project, need)
        self.type = grown(self.type, need)
        self.author = grown(self.author, need)
        self.created = grown(self.created, need)
        self.alive = grown(self.alive, need)
        self.question = grown(self.question, need)
        self.first_label = grown(self.first_label, need)
        self.label_count = grown(self.label_count, need)
        self.log_start = grown(self.log_start, need)
        self.log_end = grown(self.log_end, need)

    def new_labels(self, count: int) -> list[int]:
        """`count` vector labels never used before, consecutive."""
        labels = list(range(self.next_label, self.next_label + count))
        self.next_label += count
        return labels

    def put(self, memory: Memory, span: tuple[int, int], *, embedded: bool = True) -> tuple[Head | None, Head]:
        """Make `memory` (logged at `span`) live in a new row; its previous version's row, if any, dies.
        `embedded`: its log entry holds its vectors (False: they are still to be made). Returns (the previous head
        or None, the new head). The vector index is the caller's."""
        old = self.heads.get(memory.id)
        if old is not None:
            self._retire(memory.id)
        head = head_of(memory, self._strings)
        row = len(self.at_row)
        self.at_row.append(head)
        self._grow(row + 1)
        self.heads[memory.id] = head
        self.row_of[memory.id] = row
        self.by_hash[head.dedup_key] = memory.id
        self.log_start[row], self.log_end[row] = span
        if memory.labels:
            first, count = head.first_label, head.n_labels
            self.first_label[row], self.label_count[row] = first, count
            self.label_row = grown(self.label_row, first + count, fill=-1)
            self.label_row[first : first + count] = row
        self.project[row] = self.projects.get(memory.project)
        self.type[row] = self.types.get(memory.type)
        self.author[row] = self.authors.get(memory.author)
        self.created[row] = memory.created
        self.alive[row] = True
        self.question[row] = is_question(memory.content)
        if embedded:
            self.unembedded.discard(memory.id)
        else:
            self.unembedded.add(memory.id)
        for tag in head.tags:
            self.tag_rows.setdefault(tag, set()).add(row)
        self.lexical.add(row, f"{memory.content} {' '.join(memory.tags)}", context=memory.context,
                         reply_to=memory.reply_to, scope=int(self.author[row]))  # BM25 statistics per author
        self._link(head, head.supersedes, self._successors, self.successor_of)
        self._link(head, head.consolidates, self._consolidators, self.consolidated_into)
        undone = _undone_links(memory)
        if undone:
            self.undone_links[memory.id] = undone
        if old is None or old.created != head.created:  # which links to this id count depends on its creation
            self._settle_target(memory.id)
        return old, head

    def remove(self, memory_id: str) -> Head:
        """The live memory `memory_id` dies (its row stays, dead). Returns its head. The vector index is the
        caller's."""
        head = self._retire(memory_id)
        self._settle_target(memory_id)
        return head

    def _retire(self, memory_id: str) -> Head:
        """Kill the row of `memory_id` and drop its own links; the links naming it are the caller's."""
        head = self.heads.pop(memory_id)
        row = self.row_of.pop(memory_id)
        self.at_row[row] = None
        self.alive[row] = False
        if self.by_hash.get(head.dedup_key) == memory_id:
            del self.by_hash[head.dedup_key]
        for tag in head.tags:
            self.tag_rows.get(tag, set()).discard(row)
        self.label_row[head.first_label : head.first_label + head.n_labels] = -1
        self.lexical.remove(row)
        self._unlink(head, head.supersedes, self._successors, self.successor_of)
        self._unlink(head, head.consolidates, self._consolidators, self.consolidated_into)
        self.undone_links.pop(memory_id, None)
        self.unembedded.discard(memory_id)
        return head

    # -- the derived side of the lifecycle links ----------------------------
    def _link(self, head: Head, targets: tuple[str, ...], linkers: dict[str, set[str]], latest: dict[str, str]) -> None:
        for target in targets:
            if target == head.id:  # never made by the collection; a hand-edited import could hold one
                continue
            linkers.setdefault(target, set()).add(head.id)
            current = latest.get(target)  # one comparison: replaying n linkers of one id stays O(n)
            if self._counts(head, target) and (
                    current is None or (head.created, head.id) > (self.heads[current].created, current)):
                latest[target] = head.id

    def _unlink(self, head: Head, targets: tuple[str, ...], linkers: dict[str, set[str]],
                latest: dict[str, str]) -> None:
        for target in targets:
            found = linkers.get(target)
            if found is not None:
                found.discard(head.id)
                if not found:
                    del linkers[target]
            if latest.get(target) == head.id:  # only losing the latest linker needs a look at the others
                self._settle(target, linkers, latest)

    def _counts(self, linker: Head, target: str) -> bool:
        """Does `linker`'s link to `target` count? Not if the live memory `target` was created after it: that
        link named an earlier memory of the same id, deleted since."""
        live = self.heads.get(target)
        return live is None or linker.created >= live.created

    def _settle(self, target: str, linkers: dict[str, set[str]], latest: dict[str, str]) -> None:
        """`latest[target]` = the live linker that counts created latest (ties: the greatest id), or nothing."""
        heads = self.heads
        counted = [linker for linker in linkers.get(target, ()) if self._counts(heads[linker], target)]
        if not counted:
            latest.pop(target, None)
            return
        latest[target] = max(counted, key=lambda linker: (heads[linker].created, linker))

    def _settle_target(self, target: str) -> None:
        """Re-derive the links naming `target` after a memory of that id was put or removed."""
        if target in self._successors:
            self._settle(target, self._successors, self.successor_of)
        if target in self._consolidators:
            self._settle(target, self._consolidators, self.consolidated_into)

    def chain(self, memory_id: str) -> list[str]:
        """The supersession chain through `memory_id`, oldest first ([] when it is in none): back through the
        memories each one is the current successor of, forward through the successors."""
        successor_of, seen = self.successor_of, {memory_id}
        newer, at = [], memory_id
        while at in successor_of and successor_of[at] not in seen:
            at = successor_of[at]
            seen.add(at)
            newer.append(at)
        older, at = [], memory_id
        while True:
            head = self.heads.get(at)
            back = [t for t in (head.supersedes if head else ()) if successor_of.get(t) == at and t not in seen]
            if not back:
                break
            at = back[0]
            seen.add(at)
            older.append(at)
        chain = [*reversed(older), memory_id, *newer]
        return chain if len(chain) > 1 else []

    def is_current(self, head: Head, now: float) -> bool:
        """Neither superseded nor expired: what briefings and recall may offer."""
        return head.id not in self.successor_of and not expired(head.valid_until, now)

    # -- where each live memory's entry is in the log ---------------------
    def span(self, memory_id: str) -> tuple[int, int]:
        row = self.row_of[memory_id]
        return int(self.log_start[row]), int(self.log_end[row])

    def set_span(self, memory_id: str, span: tuple[int, int]) -> None:
        row = self.row_of[memory_id]
        self.log_start[row], self.log_end[row] = span

    def mark_embedded(self, memory_id: str, span: tuple[int, int]) -> None:
        """The live memory `memory_id` was logged again, unchanged but for its vectors, at `span`."""
        self.set_span(memory_id, span)
        self.unembedded.discard(memory_id)

    def span_bytes(self, memory_id: str) -> int:
        start, end = self.span(memory_id)
        return end - start

    # -- filters ----------------------------------------------------------
    def mask(self, filters: Filters, n_rows: int) -> np.ndarray:
        """Which of the first `n_rows` rows are live and pass `filters`."""
        mask = self.alive[:n_rows].copy()
        for value, codes, column in ((filters.project, self.projects, self.project),
                                     (filters.type, self.types, self.type),
                                     (filters.author, self.authors, self.author)):
            if value:
                code = codes.code.get(value)
                if code is None:
                    return np.zeros(n_rows, dtype=bool)
                mask &= column[:n_rows] == code
        if filters.since is not None:
            mask &= self.created[:n_rows] >= filters.since
        if filters.until is not None:
            mask &= self.created[:n_rows] <= filters.until
        if filters.tags:
            tag_mask = np.zeros(n_rows, dtype=bool)
            for tag in filters.tags:
                rows = self.tag_rows.get(tag)
                if rows:
                    tag_mask[np.fromiter(rows, dtype=np.int64)] = True
            mask &= tag_mask
        return mask


def _undone_links(memory: Memory) -> frozenset[str]:
    """The older ids whose link `memory` undid last (its link_history's latest change for them is "unlinked")
    and does not hold again."""
    last: dict[str, str] = {}
    for change in memory.link_history:
        last[change.target] = change.action
    return frozenset(t for t, action in last.items() if action == "unlinked" and t not in memory.supersedes)
