"""The memory plugin's dashboard panels: Overview (stat cards, donuts, timeline) and Memories (the same
hybrid search as memory_search, filters, versions). Plain data and templates: no web framework here."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from importlib import resources

from persmem_core import CallContext


def _template(name: str) -> str:
    return (resources.files("persmem_memory_hnsw") / "panel_templates" / name).read_text()


def _service(view):
    from .plugin import service_for

    return service_for(view.host)


def _collection(view):
    service = _service(view)
    names = sorted(service.collections()) or ["memories"]
    name = view.param("collection", "memories")
    if name not in names:
        name = names[0]
    return service, names, name


def overview(view) -> dict:
    service, names, name = _collection(view)
    if name not in service.collections():
        return {"collections": names, "collection": name, "stats": {"count": 0, "projects": {}, "types": {},
                "unique_tags": 0, "average_chars": 0}, "top_tags": {}, "timeline": {}, "oldest": None, "newest": None}
    col = service.collection(name)
    stats = col.stats()
    with col.lock.gen_rlock():
        days = Counter(datetime.fromtimestamp(m.created, UTC).date() for m in col.memories.values())
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


def browse(view) -> dict:
    from .collection import Filters
    from .records import public
    from .tools import _tags, _when, memory_get, memory_search

    service, names, name = _collection(view)
    call = CallContext(agent=view.agent, transport="http", host=view.host)
    empty = {"projects": [], "types": [], "authors": [], "results": [], "caption": "No memories yet."}
    if name not in service.collections():
        return empty
    col = service.collection(name)
    stats = col.stats()
    facets = {"projects": sorted(stats["projects"]), "types": sorted(stats["types"]), "authors": sorted(stats["authors"])}
    filters = {"project": view.param("project") or None, "memory_type": view.param("type") or None,
               "tags": view.param("tag") or None, "author": view.param("author") or None,
               "since": view.param("since") or None, "until": view.param("until") or None}
    query = view.param("q")
    if query:
        found = memory_search(query=query[:2000], top_k=20, collection=name, call=call, **filters)["results"]
        caption = f"{len(found)} best matches for “{query[:200]}”"
    else:
        rows = col.matching(Filters(project=filters["project"], type=filters["memory_type"], author=filters["author"],
                                    tags=_tags(filters["tags"]), since=_when(filters["since"], "since"),
                                    until=_when(filters["until"], "until", through_day=True)))
        rows.sort(key=lambda m: m.updated, reverse=True)
        found = [public(m) for m in col.get_many([m.id for m in rows[:50]])]
        caption = f"{len(rows)} memor{'y' if len(rows) == 1 else 'ies'}" + (", newest 50 shown" if len(rows) > 50 else "")
    for item in found:
        item["history"] = memory_get(item["id"], collection=name, include_history=True, call=call)["history"] \
            if item.get("version", 1) > 1 else []
    return {**facets, "results": found, "caption": caption}


def register(register):
    register("overview", title="Overview", template=_template("overview.html"), context=overview, order=10)
    register("memories", title="Memories", template=_template("memories.html"), context=browse, order=20)
