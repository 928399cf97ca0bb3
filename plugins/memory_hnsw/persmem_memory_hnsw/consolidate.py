"""Consolidation: mature clusters of similar memories gathered into one consolidated memory, without an LLM and
without deleting anything.

Who is consolidated: the live memories of a shared (not private) collection that are at least
`consolidate_min_age_days` old, not of a procedural type (identity, directive, preference, procedure: those are
pinned as they are), not consolidated memories themselves, not superseded, not expired and not already a member
of one. Clusters never mix projects or authors: each (project, author) group is clustered on its own.

How (deterministic, so a second run with nothing new changes nothing):
1. Growth: a candidate whose most similar existing consolidated memory of its group (measured against that
   memory's first member, the cluster's leader) reaches `consolidate_min_similarity` joins it, while it has
   fewer than MAX_MEMBERS members: a new version of that consolidated memory.
2. New clusters: the remaining candidates, oldest first (created, then id), each lead in turn: a leader's
   cluster is itself and the still unassigned candidates whose cosine with it reaches the threshold, the most
   similar first, at most MAX_MEMBERS. Kept when it has `consolidate_min_cluster` members; otherwise its
   members stay unassigned (a later leader may take them).
3. Content, extractive: a first line naming how many memories, the project and the dates, then one line per
   member's representative statement (its first sentence, or its start cut at a word), the most central
   member first (highest mean similarity to the others), each text (and first sentence) once, until
   `consolidate_max_chars`.
   Tags: the members' tags by frequency. Id: "con_" + the leader's id, so a re-run finds it again.

Every cluster is ONE `Collection.write_consolidated` call (one log append): a kill -9 mid-run leaves whole
consolidated memories only, each listing members that exist. Members are not touched: they stay searchable
(ranked below their consolidated memory: `[memory] consolidated_member_weight`).

Similarity is the cosine of memory vectors: the mean of a memory's chunk vectors (from the log: exact float32),
normalised. Who is in a cluster is decided on exact similarities (float64, rounded to 1e-9 so equal vectors
tie and the older wins). How a leader finds its neighbours: by a pass over the group's unassigned candidates
(blocks of leaders, one numpy matrix product each: O(n) per leader, so O(n^2) per group), or, in a large group
whose leaders mostly stay alone (where that pass costs most), from an hnswlib graph of the group's unassigned
candidates built for the run (_GroupGraph: O(n log n)). The switch is decided on counts, never on time, and
the graph is built on one thread in (created, id) order with a fixed seed: the same store gives the same
clusters on every run. The graph only proposes neighbours; it gives the exact pass's clusters unless it misses
one above the threshold among a leader's nearest (measured: none on the benchmark data; a miss leaves that
memory to a catch-up pass, or unclustered). The snapshot holds the read lock; the plan runs without it.
`ConsolidationJob` runs it when the server is idle.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from persmem_core.sdk import UserError

from .search.weighing import PROCEDURAL_TYPES, expired
from .permissions import is_private
from .store.records import ID_RE

log = logging.getLogger("persmem.memory.consolidate")

CONSOLIDATED_TYPE = "consolidated"
CONSOLIDATION_EDITOR = "persmem-consolidation"  # the editor of every consolidated memory's versions
MAX_MEMBERS = 20  # a consolidated memory gathers at most this many memories (its text must stay readable)
STATEMENT_CHARS = 300  # a representative statement is a member's first sentence, or its start cut near this
MAX_TAGS = 20
PREVIEW_CHARS = 300
LEADER_BLOCK = 512  # leaders scored at once against the unassigned candidates (one matrix product)
# A pass over every candidate costs O(n) per leader, O(n^2) per group (100,000 memories of one project and author:
# ~130 s); a graph of the group costs O(n log n) to build and query. Measured crossover (2 cores): ~8,000.
GRAPH_MIN_CANDIDATES = 8000
GRAPH_NODE_COST = 10_000  # adding one memory to the graph and asking it once costs ~ this many exact similarities
GRAPH_WIDER = 4  # a leader the graph gave some but too few neighbours asks again for 4x as many, 4x as wide
GRAPH_NEIGHBOURS = 32  # neighbours asked of the graph per leader (a cluster has at most MAX_MEMBERS)
GRAPH_M, GRAPH_EF_CONSTRUCTION, GRAPH_EF, GRAPH_SEED = 16, 100, 128, 100
SCREEN_MARGIN = 1e-3  # float32 screens keep what is this close below the threshold; float64 decides
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


@dataclass
class Cluster:
    id: str  # the consolidated memory's id ("con_" + its leader's id)
    project: str
    author: str
    members: list[str]  # every member id (for "grow": the existing ones and the new ones)
    action: str  # "create" | "grow" | "unchanged"
    preview: str  # the start of the consolidated memory's text
    new_members: list[str] = field(default_factory=list)  # the members this run adds ("create": all of them)

    def to_dict(self) -> dict:
        return {"id": self.id, "action": self.action, "project": self.project, "author": self.author,
                "members": self.members, "new_members": self.new_members, "preview": self.preview}


@dataclass
class ConsolidationReport:
    collection: str
    dry_run: bool
    clusters: list[Cluster] = field(default_factory=list)
    created: int = 0
    grown: int = 0
    candidates: int = 0  # memories that could be gathered (mature, unassigned, of a consolidated kind)
    seconds: float = 0.0
    stopped: bool = False  # the run was asked to stop (server shutdown) before it finished

    def to_dict(self) -> dict:
        return {"collection": self.collection, "dry_run": self.dry_run, "created": self.created,
                "grown": self.grown, "unchanged": sum(c.action == "unchanged" for c in self.clusters),
                "candidates": self.candidates, "seconds": round(self.seconds, 3),
                "clusters": [c.to_dict() for c in self.clusters]}

    def summary(self) -> str:
        verb = "would create" if self.dry_run else "created"
        grow = "would grow" if self.dry_run else "grew"
        unchanged = sum(c.action == "unchanged" for c in self.clusters)
        return (f"{self.collection}: {verb} {self.created}, {grow} {self.grown} consolidated memories "
                f"({unchanged} unchanged; {self.candidates} candidate memories) in {self.seconds:.2f} s"
                + (" (stopped early)" if self.stopped else ""))


@dataclass
class _Group:
    """One (project, author) group's snapshot: candidates (ordered by created, id) and existing consolidated
    memories, with their unit memory vectors."""

    project: str
    author: str
    ids: list[str] = field(default_factory=list)
    created: list[float] = field(default_factory=list)
    vectors: list[np.ndarray] = field(default_factory=list)
    consolidated: list[tuple[str, list[str], np.ndarray]] = field(default_factory=list)  # (id, members, anchor)


def consolidate(col, config, *, author: str | None = None, project: str | None = None, dry_run: bool,
                now: float | None = None, stop: threading.Event | None = None,
                graph: bool | None = None) -> ConsolidationReport:
    """Consolidate the mature clusters of `col` (only `author`'s and `project`'s memories when given; None: all).
    With `dry_run`, report what would be written and write nothing. `stop` ends the run between clusters.
    `graph` forces how leaders find their neighbours (True: a graph of the group, False: a pass over every
    candidate; None: whichever costs less, see _graph_pays); for tests and measurements."""
    started = time.monotonic()
    now = time.time() if now is None else now
    report = ConsolidationReport(collection=col.name, dry_run=dry_run)
    if is_private(config, col.name):
        raise UserError(f"collection {col.name!r} is private (its entries are one agent's session turns): it is "
                        "never consolidated. Consolidate a shared collection, such as 'memories'.")
    groups = _snapshot(col, config, author=author, project=project, now=now)
    threshold = config.consolidate_min_similarity
    for key in sorted(groups):
        if stop is not None and stop.is_set():
            report.stopped = True
            break
        group = groups[key]
        report.candidates += len(group.ids)
        planned = _plan_group(group, threshold, config.consolidate_min_cluster, stop, graph)
        for action, con_id, members, new in planned:
            if stop is not None and stop.is_set():
                report.stopped = True
                break
            cluster = _write(col, config, group, action, con_id, members, new, dry_run=dry_run, now=now)
            if cluster is None:
                continue
            report.clusters.append(cluster)
            report.created += cluster.action == "create"
            report.grown += cluster.action == "grow"
        for con_id, members, _ in group.consolidated:
            if con_id not in {c.id for c in report.clusters}:
                report.clusters.append(Cluster(id=con_id, project=group.project, author=group.author,
                                               members=members, action="unchanged", preview=""))
    report.clusters.sort(key=lambda c: c.action == "unchanged")  # what this run changes first (stable)
    _fill_unchanged_previews(col, report)
    report.seconds = time.monotonic() - started
    return report


# -- 1. the snapshot: candidates and existing consolidated memories, with their vectors (read lock) ----------

def _snapshot(col, config, *, author, project, now) -> dict[tuple[str, str], _Group]:
    min_created = now - config.consolidate_min_age_days * 86400.0
    skip_types = PROCEDURAL_TYPES | {CONSOLIDATED_TYPE}
    groups: dict[tuple[str, str], _Group] = {}
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
                group = groups.setdefault((head.project, head.author), _Group(head.project, head.author))
                group.consolidated.append((head.id, members, _memory_vector(col, anchor_id)))
                continue
            if (head.type in skip_types or head.id in successor_of or head.id in consolidated_into
                    or head.created > min_created or expired(head.valid_until, now)):
                continue
            group = groups.setdefault((head.project, head.author), _Group(head.project, head.author))
            group.ids.append(head.id)
            group.created.append(head.created)
            group.vectors.append(_memory_vector(col, head.id))
    return groups


def _memory_vector(col, memory_id: str) -> np.ndarray:
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


# -- 2. the plan: growth, then new clusters (exact cosine, numpy) ----------------------------------------------

def _plan_group(group: _Group, threshold: float, min_cluster: int, stop: threading.Event | None,
                graph: bool | None = None) -> list[tuple[str, str, list[int], list[int]]]:
    """[(action, consolidated id, member positions in the group (all), new member positions)], in a fixed
    order. Positions index group.ids; an existing consolidated memory's old members are not positions (its
    own list is used), so for "grow" `members` holds only the new ones too. A leader's neighbours come from a
    pass over every unassigned candidate, or (`graph`; None: when at least GRAPH_MIN_CANDIDATES are
    unassigned) from a graph of the group (_GroupGraph): the same clusters, found sooner in a large group."""
    n = len(group.ids)
    if n == 0:
        return []
    vectors = np.vstack(group.vectors)
    assigned = np.zeros(n, dtype=bool)
    plan: list[tuple[str, str, list[int], list[int]]] = []

    # Growth: each candidate (oldest first) joins the most similar consolidated memory with room left.
    if group.consolidated:
        anchors = np.vstack([anchor for _, _, anchor in group.consolidated])
        room = [MAX_MEMBERS - len(members) for _, members, _ in group.consolidated]
        joining = _join(vectors, assigned, anchors, room, threshold)
        for c in sorted(joining):
            plan.append(("grow", group.consolidated[c][0], joining[c], joining[c]))

    # New clusters: leaders in (created, id) order, each against the still unassigned candidates.
    positions = np.flatnonzero(~assigned)
    neighbours: _GroupGraph | None = None
    led = consumed = 0  # leaders so far, and the candidates they took (a leader alone: 1; a cluster: its size)
    for block_start in range(0, len(positions), LEADER_BLOCK):
        if stop is not None and stop.is_set():
            break
        block = positions[block_start : block_start + LEADER_BLOCK]
        leaders = block[~assigned[block]]
        if len(leaders) == 0:
            continue
        free = np.flatnonzero(~assigned)
        if neighbours is None and _graph_pays(graph, len(free), positions[block_start:], assigned, led, consumed):
            neighbours = _GroupGraph(vectors, free, stop)
        if neighbours is not None:
            found = neighbours.query(vectors[leaders])  # (leaders, k) positions, or None: score them all
        else:
            sims = vectors[leaders] @ vectors[free].T  # (leaders, free candidates)
        for li, leader in enumerate(leaders.tolist()):
            if assigned[leader]:
                continue
            if neighbours is None:
                near = free[sims[li] >= threshold - SCREEN_MARGIN]
            else:
                near = None if found is None else neighbours.above(found[li], vectors, assigned, leader, threshold)
                if near is None:  # more may lie past what the graph returned
                    near = _screen_all(vectors, assigned, leader, threshold)
            chosen = _members(vectors, assigned, leader, near, threshold, min_cluster)
            if chosen is None and neighbours is not None and np.any(~assigned[near] & (near != leader)):
                # Some, but too few: the leader the graph most likely shortchanged. Ask it again, wider.
                wider = neighbours.wider(vectors, assigned, leader, threshold)
                chosen = _members(vectors, assigned, leader, _screen_all(vectors, assigned, leader, threshold)
                                  if wider is None else wider, threshold, min_cluster)
            led, consumed = led + 1, consumed + (1 if chosen is None else len(chosen))
            if chosen is None:
                continue
            assigned[chosen] = True
            plan.append(("create", consolidated_id(group.ids[leader]), chosen, chosen))
    # Catch-up: a candidate still unassigned joins the most similar new cluster with room whose leader it reaches,
    # as growth would make it join on the next run (so that run has nothing to add). After a pass over every
    # candidate there is none (the leader took it); after the graph, there is one where the graph missed it.
    created = [i for i, entry in enumerate(plan) if entry[0] == "create"]
    if created and not (stop is not None and stop.is_set()):
        anchors = vectors[[plan[i][2][0] for i in created]]
        joining = _join(vectors, assigned, anchors, [MAX_MEMBERS - len(plan[i][2]) for i in created], threshold)
        for c, late in joining.items():
            action, con_id, members, _ = plan[created[c]]
            plan[created[c]] = (action, con_id, [*members, *late], [*members, *late])
    return plan


def _join(vectors: np.ndarray, assigned: np.ndarray, anchors: np.ndarray, room: list[int],
          threshold: float) -> dict[int, list[int]]:
    """Each unassigned candidate (oldest first) joins the most similar anchor with room (ties: the one listed
    first) whose similarity reaches the threshold: {anchor index: joining positions}. Marks them assigned and
    uses up `room`. Decided in float64, like _members."""
    joining: dict[int, list[int]] = {}
    free = np.flatnonzero(~assigned)
    for start in range(0, len(free), 4096):
        part = free[start : start + 4096]
        sims = vectors[part] @ anchors.T
        for offset in np.flatnonzero(sims.max(axis=1) >= threshold - SCREEN_MARGIN).tolist():
            position = int(part[offset])
            near = np.flatnonzero(sims[offset] >= threshold - SCREEN_MARGIN)
            exact = np.round(anchors[near].astype(np.float64) @ vectors[position].astype(np.float64), 9)
            for c in near[np.lexsort((near, -exact))][exact[np.lexsort((near, -exact))] >= threshold].tolist():
                if room[c] > 0:
                    room[c] -= 1
                    joining.setdefault(c, []).append(position)
                    assigned[position] = True
                    break
    return joining


def _graph_pays(graph: bool | None, free: int, ahead: np.ndarray, assigned: np.ndarray, led: int,
                consumed: int) -> bool:
    """Switch the rest of a group's leaders to a graph now? Forced by `graph` (True/False). Otherwise once the
    first leaders have shown how many candidates a leader takes (`consumed / led`), when at least
    GRAPH_MIN_CANDIDATES are unassigned and the passes still to come (the leaders expected among the unassigned
    positions `ahead`, each scoring every unassigned candidate) cost more than building the graph and asking
    it. Many one-off memories (each leads alone) switch; leaders that gather full clusters stay exact (the
    unassigned shrink fast). Decided on counts only, never on time: deterministic."""
    if graph is not None:
        return graph and free > 1
    if free < GRAPH_MIN_CANDIDATES or led == 0:
        return False
    leaders_left = int(np.count_nonzero(~assigned[ahead])) * led / consumed
    return leaders_left * free > GRAPH_NODE_COST * (free + leaders_left)


def _members(vectors: np.ndarray, assigned: np.ndarray, leader: int, near: np.ndarray, threshold: float,
             min_cluster: int) -> list[int] | None:
    """The cluster `leader` starts from the candidate positions `near` (a superset of those that qualify), or
    None when too few qualify. The decision is made on float64 similarities, so it does not depend on how `near`
    was found (a float32 matrix product or the graph): both paths decide alike."""
    near = near[~assigned[near] & (near != leader)]
    if len(near) + 1 < min_cluster:
        return None
    # Rounded: equal vectors tie exactly (then the older wins), whichever matrix shape the product ran in.
    sims = np.round(vectors[near].astype(np.float64) @ vectors[leader].astype(np.float64), 9)
    keep = sims >= threshold
    near, sims = near[keep], sims[keep]
    if len(near) + 1 < min_cluster:
        return None
    best = np.lexsort((near, -sims))[: MAX_MEMBERS - 1]  # the most similar first (ties: the older)
    return [leader, *near[best].tolist()]


def _screen_all(vectors: np.ndarray, assigned: np.ndarray, leader: int, threshold: float) -> np.ndarray:
    """Every unassigned candidate within the float32 screen of `leader` (one matrix-vector product)."""
    return np.flatnonzero((vectors @ vectors[leader] >= threshold - SCREEN_MARGIN) & ~assigned)


class _GroupGraph:
    """An hnswlib graph of one group's unassigned candidates (their memory vectors, labelled by position), built
    for this run only: a leader's neighbours come from it in O(log n) instead of a pass over the whole group.

    Deterministic: the graph is built on one thread, in the group's (created, id) order, with hnswlib's fixed
    level seed, from the snapshot's vectors: the same store gives the same graph and the same answers. (The
    collection's own graph is not used: it holds chunks, not memory vectors, of every project and author, and
    its shape depends on the order of past writes and rebuilds, and on this run's own writes.)
    The graph only proposes: every member is decided by exact similarity (_members); a leader whose k nearest
    all qualify (a crowd) is scored against every candidate, and one given some but too few asks again wider.
    Identical vectors (the same text stored twice) enter the graph once (hnswlib prunes exact twins from each
    other's links, and then misses them); a found one stands for all its twins."""

    def __init__(self, vectors: np.ndarray, positions: np.ndarray, stop: threading.Event | None):
        import hnswlib

        first_of: dict[bytes, int] = {}
        twins: dict[int, list[int]] = {}
        for position in positions.tolist():
            key = hashlib.blake2b(vectors[position].tobytes(), digest_size=16).digest()
            first = first_of.setdefault(key, position)
            if first != position:
                twins.setdefault(first, [first]).append(position)
        self.twins = {first: np.asarray(all_of, dtype=np.int64) for first, all_of in twins.items()}
        self.has_twins = np.zeros(len(vectors), dtype=bool)
        self.has_twins[list(self.twins)] = True
        self.first_twin = np.arange(len(vectors), dtype=np.int64)  # position -> its twins' first (the one in the graph)
        for first, all_of in self.twins.items():
            self.first_twin[all_of] = first
        distinct = np.asarray(sorted(set(first_of.values())), dtype=np.int64)  # (created, id) order
        self.k = min(GRAPH_NEIGHBOURS, len(distinct))
        self.index = hnswlib.Index(space="ip", dim=vectors.shape[1])
        self.index.init_index(max_elements=len(distinct), M=GRAPH_M, ef_construction=GRAPH_EF_CONSTRUCTION,
                              random_seed=GRAPH_SEED)
        self.index.set_num_threads(1)
        for start in range(0, len(distinct), 8192):  # in parts, so a server shutdown need not wait for it
            if stop is not None and stop.is_set():
                break
            part = distinct[start : start + 8192]
            self.index.add_items(vectors[part], part.astype(np.uint64), num_threads=1)
        self.index.set_ef(max(GRAPH_EF, self.k))

    def query(self, queries: np.ndarray) -> np.ndarray | None:
        """The positions of each query's k nearest distinct vectors; None when the graph cannot answer (too few
        reachable, or a stopped build): the caller then scores every candidate."""
        try:
            labels, _ = self.index.knn_query(queries, k=self.k, num_threads=1)
        except RuntimeError:
            return None
        return labels.astype(np.int64)

    def _with_twins(self, found: np.ndarray, leader: int) -> np.ndarray:
        """`found` with each one's twins, and the leader's (a graph may miss a query's own vector)."""
        found = np.unique(np.append(found, self.first_twin[leader]))
        if not self.has_twins[found].any():
            return found
        return np.concatenate([self.twins[f] if self.has_twins[f] else [f] for f in found.tolist()]).astype(np.int64)

    def above(self, found: np.ndarray, vectors: np.ndarray, assigned: np.ndarray, leader: int,
              threshold: float) -> np.ndarray | None:
        """The positions among `found` (the leader's k nearest, with their twins) within the screen of the
        threshold. None when all k are and fewer than a full cluster of them is unassigned (a crowd: more may
        qualify past them): the caller then scores every candidate. (When a full cluster is unassigned among
        them, the most similar are among them.)"""
        sims = vectors[found] @ vectors[leader]
        screened = self._with_twins(found[sims >= threshold - SCREEN_MARGIN], leader)
        if len(found) < self.k or sims.min() < threshold - SCREEN_MARGIN:
            return screened
        return screened if np.count_nonzero(~assigned[screened] & (screened != leader)) >= MAX_MEMBERS - 1 else None

    def wider(self, vectors: np.ndarray, assigned: np.ndarray, leader: int, threshold: float) -> np.ndarray | None:
        """`above` for GRAPH_WIDER times as many nearest, searched GRAPH_WIDER times as wide."""
        k = min(self.k * GRAPH_WIDER, self.index.get_current_count())
        self.index.set_ef(max(GRAPH_EF, k) * GRAPH_WIDER)
        try:
            found = self.index.knn_query(vectors[leader], k=k, num_threads=1)[0][0].astype(np.int64)
        except RuntimeError:
            return None
        finally:
            self.index.set_ef(max(GRAPH_EF, self.k))
        sims = vectors[found] @ vectors[leader]
        if len(found) >= k and sims.min() >= threshold - SCREEN_MARGIN:
            return None
        return self._with_twins(found[sims >= threshold - SCREEN_MARGIN], leader)


# -- 3. the text, and the write -------------------------------------------------------------------------------

def representative_statement(content: str) -> str:
    """A member's first sentence, or its start cut at a word near STATEMENT_CHARS; on one line."""
    text = " ".join(content.split())
    first = SENTENCE_END.split(text, maxsplit=1)[0]
    if len(first) <= STATEMENT_CHARS:
        return first
    cut = first[:STATEMENT_CHARS].rsplit(" ", 1)[0]
    return (cut if len(cut) >= STATEMENT_CHARS // 2 else first[:STATEMENT_CHARS]) + " …"


def consolidated_text(memories: list, vectors: np.ndarray, project: str, max_chars: int) -> str:
    """The extractive text of a consolidated memory of `memories` (Memory records, `vectors` their unit memory
    vectors in the same order): a first line, then the representative statements, most central first."""
    dates = [time.strftime("%Y-%m-%d", time.gmtime(m.created)) for m in memories]
    lines = [f"Consolidated from {len(memories)} memories of project {project}, {min(dates)} to {max(dates)}:"]
    if len(memories) > 1:
        sims = vectors @ vectors.T
        centrality = (sims.sum(axis=1) - np.diag(sims)) / (len(memories) - 1)
    else:
        centrality = np.ones(1, dtype=np.float32)
    order = sorted(range(len(memories)), key=lambda i: (-round(float(centrality[i]), 6), memories[i].created,
                                                        memories[i].id))
    seen, used, left_out = set(), len(lines[0]), 0
    reserve = 40  # room for the closing "… and N more" line
    for i in order:
        memory = memories[i]
        statement = representative_statement(memory.content)
        keys = {memory.content_hash or memory.content, statement.casefold()}
        if keys & seen:  # the same text, or the same first sentence: once
            continue
        seen |= keys
        line = "- " + statement
        if used + 1 + len(line) > max_chars - reserve:
            left_out += 1
            continue
        lines.append(line)
        used += 1 + len(line)
    if left_out:
        lines.append(f"- … and {left_out} more (memory_get lists every member)")
    return "\n".join(lines)


def merged_tags(memories: list) -> list[str]:
    counts = Counter(tag for m in memories for tag in dict.fromkeys(m.tags))
    return [tag for tag, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:MAX_TAGS]


def _write(col, config, group: _Group, action: str, con_id: str, positions: list[int], new: list[int], *,
           dry_run: bool, now: float) -> Cluster | None:
    """Write one consolidated memory (one log append), or describe it when `dry_run`. None when it cannot be
    written (its id is taken by another kind of memory, or its members are gone)."""
    new_ids = [group.ids[p] for p in new]
    if action == "grow":
        existing = next(members for cid, members, _ in group.consolidated if cid == con_id)
        member_ids = [*existing, *new_ids]
    else:
        member_ids = new_ids
    memories = col.get_many(member_ids)  # the live ones, in order
    if not memories:
        return None
    if action == "create":
        taken = col.memories.get(con_id)
        if taken is not None:  # someone stored a memory under that id: never overwrite it
            log.warning("collection %s: not consolidating under %s: that id is taken by a %s memory",
                        col.name, con_id, taken.type)
            return None
    position_of = {memory_id: p for p, memory_id in enumerate(group.ids)}
    vectors = np.vstack([group.vectors[position_of[m.id]] if m.id in position_of else _memory_vector(col, m.id)
                         for m in memories])
    content = consolidated_text(memories, vectors, group.project, config.consolidate_max_chars)
    member_ids = [m.id for m in memories]
    cluster = Cluster(id=con_id, project=group.project, author=group.author, members=member_ids, action=action,
                      preview=content[:PREVIEW_CHARS], new_members=[m for m in new_ids if m in set(member_ids)])
    if dry_run:
        return cluster
    from .collection import NewMemory

    item = NewMemory(content=content, project=group.project, type=CONSOLIDATED_TYPE, tags=merged_tags(memories),
                     memory_id=con_id, author=group.author, consolidates=member_ids, editor=CONSOLIDATION_EDITOR)
    col.write_consolidated(item, author=group.author)
    return cluster


def _fill_unchanged_previews(col, report: ConsolidationReport) -> None:
    unchanged = [c for c in report.clusters if c.action == "unchanged"]
    by_id = {m.id: m for m in col.get_many([c.id for c in unchanged])}
    for cluster in unchanged:
        if cluster.id in by_id:
            cluster.preview = by_id[cluster.id].content[:PREVIEW_CHARS]


# -- the idle-time job ------------------------------------------------------------------------------------------

class ConsolidationJob:
    """The server's scheduled consolidation, started by MemoryService once the store is loaded: every
    `consolidate_every_hours` (0: never), once no memory has been written for `consolidate_idle_minutes`, over
    every shared collection, all authors. A write is noticed as a change in the collections' log sizes (no
    hook on the write path). The first run comes once the server has been idle that long; `stop()` ends a
    run between clusters."""

    def __init__(self, service, config, clock: Callable[[], float] = time.monotonic):
        self.service, self.config, self.clock = service, config, clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.runs = 0

    def start(self) -> ConsolidationJob:
        if self.config.consolidate_every_hours > 0:
            self._thread = threading.Thread(target=self._loop, name="memory-consolidation", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        every = self.config.consolidate_every_hours * 3600.0
        idle = self.config.consolidate_idle_minutes * 60.0
        poll = max(0.1, min(30.0, every / 4, idle / 4 if idle else 30.0))
        sizes, last_write, last_run = self._log_sizes(), self.clock(), None
        while not self._stop.wait(poll):
            current = self._log_sizes()
            if current != sizes:
                sizes, last_write = current, self.clock()
                continue
            now = self.clock()
            if now - last_write < idle or (last_run is not None and now - last_run < every):
                continue
            self.run_once()
            last_run, sizes = self.clock(), self._log_sizes()  # its own writes are not the agents' activity

    def _log_sizes(self) -> dict[str, int]:
        return {name: col.log.size for name, col in self.service.collections().items()}

    def run_once(self) -> list[ConsolidationReport]:
        """Consolidate every shared collection now; one log line per collection. A failure is logged and the
        job goes on (the next run tries again)."""
        reports = []
        for name, col in sorted(self.service.collections().items()):
            if self._stop.is_set():
                break
            if is_private(self.config, name):
                continue
            try:
                report = consolidate(col, self.config, dry_run=False, stop=self._stop)
            except Exception:  # noqa: BLE001 - an upkeep job: logged, retried at the next run
                log.exception("consolidation of collection %s failed; the next run tries again", name)
                continue
            log.info("consolidation: %s", report.summary())
            reports.append(report)
        self.runs += 1
        return reports
