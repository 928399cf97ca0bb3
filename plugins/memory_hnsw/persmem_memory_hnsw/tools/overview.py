"""A collection as a whole: memory_consolidate, memory_stats and memory_list_collections."""

from __future__ import annotations

import time

from persmem_core.sdk import CallContext

from ..search.replies import consolidation_reply
from ..service import check_collection_name
from ..store.query import did_you_mean, parse_label
from ..store.records import iso
from .arguments import caller_memory


def memory_consolidate(collection: str = "memories", project: str = "", dry_run: bool = True,
                       call: CallContext = None) -> dict:
    """Merge mature clusters of your own similar memories (per project) into one consolidated memory each
    (their statements, merged tags, links to members; members are kept, ranked a little lower). Deterministic.
    dry_run=true (default) only shows the clusters; dry_run=false writes them."""
    check_collection_name(collection)
    config = call.host.section("memory")
    memory = caller_memory(call)
    project = parse_label(project, "project") if project else None
    if not memory.exists(collection):
        return {"collection": collection, "dry_run": dry_run, "created": 0, "grown": 0, "clusters": [],
                "hint": did_you_mean("collection", collection, memory.names())}
    report = memory.consolidate(collection, project=project, dry_run=dry_run, now=time.time())
    return consolidation_reply(report, collection, dry_run, config.search_reply_chars)


def memory_stats(collection: str = "memories", project: str = "", call: CallContext = None) -> dict:
    """Counts for a collection or one project: memories, projects, types, authors, tags, sizes, oldest/newest,
    superseded, consolidated, expired, review_due."""
    memory = caller_memory(call)
    if not memory.exists(collection):
        check_collection_name(collection)
        return {"collection": collection, "count": 0, "projects": {}, "types": {}, "tags": {},
                "hint": did_you_mean("collection", collection, memory.names())}
    stats, heads = memory.stats(collection, project or None)
    for key in ("oldest", "newest"):
        stats[key] = iso(stats[key]) if stats[key] else None
    stats.update(memory.lifecycle_counts(collection, heads, time.time()))
    if project and not stats["count"]:
        stats["hint"] = did_you_mean("project", project, memory.names_in_use(collection)["project"])
    return stats


def memory_list_collections(call: CallContext = None) -> dict:
    """List collections with their memory counts (of a private one, like `sessions`, your own entries)."""
    memory = caller_memory(call)
    listed = [{"name": name, "count": memory.count(name), **({"private": True} if memory.private(name) else {})}
              for name in memory.names()]
    return {"collections": listed}
