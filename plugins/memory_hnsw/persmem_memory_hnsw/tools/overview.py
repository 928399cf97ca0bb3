"""A collection as a whole: memory_consolidate, memory_stats and memory_list_collections."""

from __future__ import annotations

import time

from persmem_core.sdk import CallContext

from ..search.replies import consolidation_reply
from ..service import check_collection_name
from ..store.query import did_you_mean, parse_label
from ..store.records import iso
from .arguments import caller_memory


def memory_consolidate(collection: str = "memories", project: str | None = None, dry_run: bool = True,
                       call: CallContext = None) -> dict:
    """Group mature clusters of your own similar memories (older than [memory] consolidate_min_age_days, in one
    project) into one consolidated memory each: their representative statements, merged tags, and links to
    every member. Extractive and deterministic (no rewording, no model): running it again changes nothing
    unless new memories joined a cluster. Members are never deleted: they stay searchable, rank a little below
    their consolidated memory, and say consolidated_into. dry_run=true (the default) only shows the clusters
    it would make; call again with dry_run=false to write them. Only your own memories; project narrows it.
    Returns {"dry_run", "created", "grown", "clusters": [{id, project, members, action, preview}], ...}."""
    check_collection_name(collection)
    config = call.host.section("memory")
    memory = caller_memory(call)
    project = parse_label(project, "project") if project else None
    if not memory.exists(collection):
        return {"collection": collection, "dry_run": dry_run, "created": 0, "grown": 0, "clusters": [],
                "hint": did_you_mean("collection", collection, memory.names())}
    report = memory.consolidate(collection, project=project, dry_run=dry_run, now=time.time())
    return consolidation_reply(report, collection, dry_run, config.search_reply_chars)


def memory_stats(collection: str = "memories", project: str | None = None, call: CallContext = None) -> dict:
    """Counts for a collection (or one project of it): memories, projects, types, authors, tag distribution,
    sizes, oldest/newest, and the lifecycle: superseded (replaced by a later memory), consolidated (gathered into
    a consolidated memory), expired (past valid_until) and review_due (past review_after). A collection or
    project that does not exist gives count 0 and a `hint` naming the closest existing ones."""
    memory = caller_memory(call)
    if not memory.exists(collection):
        check_collection_name(collection)
        return {"collection": collection, "count": 0, "projects": {}, "types": {}, "tags": {},
                "hint": did_you_mean("collection", collection, memory.names())}
    stats, heads = memory.stats(collection, project)
    for key in ("oldest", "newest"):
        stats[key] = iso(stats[key]) if stats[key] else None
    stats.update(memory.lifecycle_counts(collection, heads, time.time()))
    if project and not stats["count"]:
        stats["hint"] = did_you_mean("project", project, memory.names_in_use(collection)["project"])
    return stats


def memory_list_collections(call: CallContext = None) -> dict:
    """List collections and how many memories each holds. In a private collection (each agent sees only its
    own entries, like `sessions`, your archived session turns) the count is of your own, marked private."""
    memory = caller_memory(call)
    listed = [{"name": name, "count": memory.count(name), **({"private": True} if memory.private(name) else {})}
              for name in memory.names()]
    return {"collections": listed}
