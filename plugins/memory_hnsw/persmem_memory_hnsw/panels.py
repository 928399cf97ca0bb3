"""The memory plugin's dashboard panels: Overview (stat cards, donuts, timeline) and Memories (the same
hybrid search as memory_search, filters, versions). Plain data and templates: no web framework here.
In a private collection (`[memory] private_collections`) both show the logged-in agent's own entries only."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from importlib import resources

from .permissions import is_private, own_filters
from .query import Filters, parse_filters
from .records import public, public_version, summarize
from .service import service


def _template(name: str) -> str:
    return (resources.files("persmem_memory_hnsw") / "panel_templates" / name).read_text()


def _collection(view):
    memories = service(view.host)
    names = sorted(memories.collections()) or ["memories"]
    name = view.param("collection", "memories")
    if name not in names:
        name = names[0]
    return memories, names, name


def overview(view) -> dict:
    memories, names, name = _collection(view)
    if name not in memories.collections():
        return {"collections": names, "collection": name, "stats": {"count": 0, "projects": {}, "types": {},
                "unique_tags": 0, "average_chars": 0}, "top_tags": {}, "timeline": {}, "oldest": None, "newest": None}
    col = memories.collection(name)
    stats, heads = _stats(view, col)
    days = Counter(datetime.fromtimestamp(m.created, UTC).date() for m in heads)
    timeline = {}
    if days:
        now = time.time()  # from the first day stored (at most 90 days back, at least 14 days shown)
        first = min(max(min(days), datetime.fromtimestamp(now - 89 * 86400, UTC).date()),
                    datetime.fromtimestamp(now - 13 * 86400, UTC).date())
        day = first
        today = datetime.now(UTC).date()
        while day <= today:
            timeline[day.isoformat()[5:]] = days.get(day, 0)
            day = day.fromordinal(day.toordinal() + 1)
    return {"collections": names, "collection": name, "stats": stats,
            "top_tags": dict(list(stats["tags"].items())[:10]), "timeline": timeline,
            "oldest": stats["oldest"], "newest": stats["newest"]}


def _stats(view, col) -> tuple[dict, list]:
    """The collection's counts and its memories' heads, as the logged-in agent may see them."""
    if is_private(col.config, col.name):
        heads = col.matching(Filters(author=view.agent))
        return {"collection": col.name, **summarize(heads)}, heads
    with col.lock.gen_rlock():
        heads = list(col.memories.values())
    return col.stats(), heads


def browse(view) -> dict:
    memories, names, name = _collection(view)
    empty = {"projects": [], "types": [], "authors": [], "results": [], "caption": "No memories yet."}
    if name not in memories.collections():
        return empty
    col = memories.collection(name)
    stats, _ = _stats(view, col)
    facets = {"projects": sorted(stats["projects"]), "types": sorted(stats["types"]), "authors": sorted(stats["authors"])}
    filters = parse_filters(project=view.param("project"), memory_type=view.param("type"), tags=view.param("tag"),
                            author=view.param("author"), since=view.param("since"), until=view.param("until"))
    filters = own_filters(col.config, name, view.agent, filters)
    if filters is None:  # another agent's entries of a private collection
        return {**facets, "results": [], "caption": "No memories: this collection shows only your own."}
    query = view.param("q")
    if query:  # the same hybrid search as memory_search
        found = memories.search(name, query[:2000], top_k=20, filters=filters)
        caption = f"{len(found)} best matches for “{query[:200]}”"
    else:
        rows = col.matching(filters)
        rows.sort(key=lambda m: m.updated, reverse=True)
        found = [public(m) for m in col.get_many([m.id for m in rows[:50]])]
        caption = f"{len(rows)} memor{'y' if len(rows) == 1 else 'ies'}" + (", newest 50 shown" if len(rows) > 50 else "")
    for item in found:
        item["history"] = [public_version(v) for v in col.get(item["id"]).history] if item.get("version", 1) > 1 else []
    return {**facets, "results": found, "caption": caption}


def register(register):
    register("overview", title="Overview", template=_template("overview.html"), context=overview, order=10)
    register("memories", title="Memories", template=_template("memories.html"), context=browse, order=20)
