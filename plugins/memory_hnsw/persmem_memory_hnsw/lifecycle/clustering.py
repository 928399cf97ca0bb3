"""Finding a consolidation's clusters in one (project, author) group: growth of the existing consolidated
memories, then new clusters, decided on exact similarities (deterministic: the same store gives the same plan).

1. Growth: a candidate whose most similar existing consolidated memory of its group (measured against that
   memory's first member, the cluster's leader) reaches `consolidate_min_similarity` joins it, while it has
   fewer than MAX_MEMBERS members: a new version of that consolidated memory.
2. New clusters: the remaining candidates, oldest first (created, then id), each lead in turn: a leader's
   cluster is itself and the still unassigned candidates whose cosine with it reaches the threshold, the most
   similar first, at most MAX_MEMBERS. Kept when it has `consolidate_min_cluster` members; otherwise its
   members stay unassigned (a later leader may take them).

Who is in a cluster is decided on exact similarities (float64, rounded to 1e-9 so equal vectors tie and the
older wins). How a leader finds its neighbours: by a pass over the group's unassigned candidates (blocks of
leaders, one numpy matrix product each: O(n) per leader, so O(n^2) per group), or, in a large group whose leaders
mostly stay alone (where that pass costs most), from an hnswlib graph of the group's unassigned candidates built
for the run (_GroupGraph: O(n log n)). The switch is decided on counts, never on time, and the graph is built on
one thread in (created, id) order with a fixed seed: the same store gives the same clusters on every run. The
graph only proposes neighbours; it gives the exact pass's clusters unless it misses one above the threshold among
a leader's nearest (measured: none on the benchmark data; a miss leaves that memory to a catch-up pass, or
unclustered). Nothing here reads the collection: it plans on the snapshot (candidates.py).
"""

from __future__ import annotations

import hashlib
import threading

import numpy as np

from .candidates import Group, consolidated_id

MAX_MEMBERS = 20  # a consolidated memory gathers at most this many memories (its text must stay readable)
LEADER_BLOCK = 512  # leaders scored at once against the unassigned candidates (one matrix product)
# A pass over every candidate costs O(n) per leader, O(n^2) per group (100,000 memories of one project and author:
# ~130 s); a graph of the group costs O(n log n) to build and query. Measured crossover (2 cores): ~8,000.
GRAPH_MIN_CANDIDATES = 8000
GRAPH_NODE_COST = 10_000  # adding one memory to the graph and asking it once costs ~ this many exact similarities
GRAPH_WIDER = 4  # a leader the graph gave some but too few neighbours asks again for 4x as many, 4x as wide
GRAPH_NEIGHBOURS = 32  # neighbours asked of the graph per leader (a cluster has at most MAX_MEMBERS)
GRAPH_M, GRAPH_EF_CONSTRUCTION, GRAPH_EF, GRAPH_SEED = 16, 100, 128, 100
SCREEN_MARGIN = 1e-3  # float32 screens keep what is this close below the threshold; float64 decides


def plan_group(group: Group, threshold: float, min_cluster: int, stop: threading.Event | None,
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
