"""Consolidation: mature clusters of similar memories gathered into one consolidated memory, without an LLM and
without deleting anything. `consolidate` runs it on one collection (the tool, the command, the panel's preview
and the idle-time job all call it).

Who is consolidated: the live memories of a shared (not private) collection that are at least
`consolidate_min_age_days` old, not of a procedural type, not consolidated memories themselves, not superseded,
not expired and not already a member of one (candidates.py). Clusters never mix projects or authors: each
(project, author) group is clustered on its own.

How (deterministic, so a second run with nothing new changes nothing):
1. the snapshot: candidates and existing consolidated memories, with their memory vectors, under the read lock
   (candidates.py);
2. the plan: growth of the existing consolidated memories, then new clusters, on exact similarities, without
   the lock (clustering.py);
3. the write: each cluster's extractive text, as ONE `Collection.write_consolidated` call (one log append), so
   a kill -9 mid-run leaves whole consolidated memories only (consolidated_memory.py).
Members are not touched: they stay searchable (ranked below their consolidated memory: `[memory]
consolidated_member_weight`). `ConsolidationJob` (consolidation_job.py) runs it when the server is idle.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from persmem_core.sdk import UserError

from ..permissions import is_private
from .candidates import snapshot
from .clustering import plan_group
from .consolidated_memory import PREVIEW_CHARS, Cluster, write_cluster


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


def consolidate(col, config, *, author: str | None = None, project: str | None = None, dry_run: bool,
                now: float | None = None, stop: threading.Event | None = None,
                graph: bool | None = None, conversations: bool = True) -> ConsolidationReport:
    """Consolidate the mature clusters of `col` (only `author`'s and `project`'s memories when given; None: all).
    With `dry_run`, report what would be written and write nothing. `stop` ends the run between clusters.
    `graph` forces how leaders find their neighbours (True: a graph of the group, False: a pass over every
    candidate; None: whichever costs less, see clustering._graph_pays); for tests and measurements.
    `conversations=False` (the idle-time job) leaves imported conversations' turns alone (candidates.py)."""
    started = time.monotonic()
    now = time.time() if now is None else now
    report = ConsolidationReport(collection=col.name, dry_run=dry_run)
    if is_private(config, col.name):
        raise UserError(f"collection {col.name!r} is private (its entries are one agent's session turns): it is "
                        "never consolidated. Consolidate a shared collection, such as 'memories'.")
    groups = snapshot(col, config, author=author, project=project, now=now, conversations=conversations)
    threshold = config.consolidate_min_similarity
    for key in sorted(groups):
        if stop is not None and stop.is_set():
            report.stopped = True
            break
        group = groups[key]
        report.candidates += len(group.ids)
        planned = plan_group(group, threshold, config.consolidate_min_cluster, stop, graph)
        for action, con_id, members, new in planned:
            if stop is not None and stop.is_set():
                report.stopped = True
                break
            cluster = write_cluster(col, config, group, action, con_id, members, new, dry_run=dry_run, now=now)
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


def _fill_unchanged_previews(col, report: ConsolidationReport) -> None:
    unchanged = [c for c in report.clusters if c.action == "unchanged"]
    by_id = {m.id: m for m in col.get_many([c.id for c in unchanged])}
    for cluster in unchanged:
        if cluster.id in by_id:
            cluster.preview = by_id[cluster.id].content[:PREVIEW_CHARS]
