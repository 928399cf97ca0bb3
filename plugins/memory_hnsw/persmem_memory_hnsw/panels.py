"""The memory plugin's dashboard panels: Overview (stat cards, donuts, timeline), Memories (the same hybrid
search as memory_search, filters, versions, each memory's lifecycle: its badges and its supersession chain) and
Lifecycle (consolidated memories and their members, what a consolidation would gather now, memories due for
review or expired, the latest supersession links). Plain data and templates: no web framework here.
In a private collection (`[memory] private_collections`) every panel shows the logged-in agent's own entries
only, and Lifecycle previews no consolidation there (the store never consolidates session turns).

Every list is bounded (newest 50 and the like) and reads from the log only the memories it shows, so a panel
answers in milliseconds at 10k memories; the consolidation preview, a clustering pass over the collection, runs
only when asked for (its button)."""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime
from importlib import resources
from urllib.parse import urlencode

from persmem_core.sdk import UserError

from .search.replies import above_floor
from .search.weighing import expired
from .store.query import parse_filters
from .store.records import iso, public, public_version
from .service import service

LIST_LIMIT = 50  # rows of each Lifecycle list, results of a Memories listing
MEMBERS_SHOWN = 12  # members listed under one consolidated memory or one previewed cluster
CHAIN_SHOWN = 20  # steps of a supersession chain shown (the newest ones)
SNIPPET_CHARS = 160


def _template(name: str) -> str:
    return (resources.files("persmem_memory_hnsw") / "panel_templates" / name).read_text()


def _collection(view):
    """(the logged-in agent's door, the collections, the one shown)."""
    memory = service(view.host).as_agent(view.agent)
    names = memory.names() or ["memories"]
    name = view.param("collection", "memories")
    if name not in names:
        name = names[0]
    return memory, names, name


def overview(view) -> dict:
    memory, names, name = _collection(view)
    if not memory.exists(name):
        return {"collections": names, "collection": name, "stats": {"count": 0, "projects": {}, "types": {},
                "unique_tags": 0, "average_chars": 0}, "top_tags": {}, "timeline": {}, "oldest": None, "newest": None}
    stats, heads = memory.stats(name)
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


# -- Memories ------------------------------------------------------------------------------------------------

def browse(view) -> dict:
    memory, names, name = _collection(view)
    empty = {"projects": [], "types": [], "authors": [], "results": [], "caption": "No memories yet.",
             "collection": name}
    if not memory.exists(name):
        return empty
    stats, _ = memory.stats(name)
    facets = {"projects": sorted(stats["projects"]), "types": sorted(stats["types"]),
              "authors": sorted(stats["authors"]), "collection": name}
    filters = parse_filters(project=view.param("project"), memory_type=view.param("type"), tags=view.param("tag"),
                            author=view.param("author"), since=view.param("since"), until=view.param("until"))
    if not memory.may_ask(name, filters):  # another agent's entries of a private collection
        return {**facets, "results": [], "caption": "No memories: this collection shows only your own."}
    now = time.time()
    include_expired = view.param("expired") == "1"  # as memory_search: expired memories hidden unless asked
    query, wanted = view.param("q"), view.param("id")
    if wanted:  # one memory, as a badge's link names it
        found = [(m, None) for m in memory.get_many(name, [wanted])]
        caption = f"memory {wanted[:130]}" if found else f"No memory {wanted[:130]!r} in this collection."
    elif query:  # the same hybrid search as memory_search (without counting retrievals: a person browsing)
        hits = memory.search(name, query[:2000], top_k=20, filters=filters, include_expired=include_expired)
        kept = above_floor(hits, memory.config.search_min_relative_score)  # memory_search's floor, the same
        found = [(hit.memory, hit) for hit in kept]
        below = len(hits) - len(kept)
        caption = (f"{len(kept)} best match{'' if len(kept) == 1 else 'es'} for “{query[:200]}”"
                   + (f"; {below} weaker match{'' if below == 1 else 'es'} below the relevance floor not shown"
                      if below else ""))
    else:
        rows = [m for m in memory.matching(name, filters) if include_expired or not expired(m.valid_until, now)]
        rows.sort(key=lambda m: m.updated, reverse=True)
        found = [(m, None) for m in memory.get_many(name, [m.id for m in rows[:LIST_LIMIT]])]
        caption = (f"{len(rows)} memor{'y' if len(rows) == 1 else 'ies'}"
                   + (f", newest {LIST_LIMIT} shown" if len(rows) > LIST_LIMIT else ""))
    toggle = {"href": "?" + urlencode({**view.params, "expired": "" if include_expired else "1"}),
              "label": "hide expired memories" if include_expired else "include expired memories"}
    return {**facets, "results": [_shown(memory, name, found_memory, hit) for found_memory, hit in found],
            "caption": caption,
            "expired_toggle": None if wanted else toggle}


def _shown(door, name: str, memory, hit=None) -> dict:
    """A memory as the Memories panel shows it: whole, with its versions, lifecycle marks, supersession chain
    and link history; a search `hit` adds its score and restated_by (the later memory it ranks below)."""
    item = public(memory)
    if hit is not None:
        item["score"] = round(hit.score, 4)
        if hit.restated_by:
            item["restated_by"] = hit.restated_by
    item["history"] = [public_version(v) for v in memory.history] if memory.version > 1 else []
    item["lifecycle"] = marks = _lifecycle(door, name, memory.id)
    chain = marks["chain"] if marks else []
    item["chain"] = _chain(door, name, chain[-CHAIN_SHOWN:])
    item["chain_hidden"] = max(0, len(chain) - CHAIN_SHOWN)  # older steps of a very long chain, not shown
    item["links"] = [_link_change(change) for change in reversed(memory.link_history)]
    return item


def _lifecycle(door, name: str, memory_id: str) -> dict | None:
    """The memory's lifecycle marks (Collection.lifecycle_of), with its dates as text; None if it is gone."""
    try:
        marks = dict(door.lifecycle_of(name, memory_id))
    except UserError:  # deleted since it was listed: shown without marks
        return None
    for key in ("valid_until", "review_after"):
        marks[key + "_text"] = _date(marks.get(key))
    marks["rated"] = sum((marks.get("feedback") or {}).values())
    return marks


def _chain(door, name: str, chain_ids: list[str]) -> list[dict]:
    """A supersession chain, oldest first, each step with the start of its text and how it replaced the step
    before it (from the newer memory's link_history: explicit, detected with its similarity and shared terms)."""
    by_id = {m.id: m for m in door.get_many(name, chain_ids)}  # the steps the viewer may see
    ids = [i for i in chain_ids if i in by_id]
    steps, previous = [], None
    for memory_id in ids:
        memory = by_id.get(memory_id)
        if memory is None:
            continue
        link = None
        if previous is not None:  # the latest "linked" change naming the step before, else any naming the chain
            changes = [c for c in memory.link_history if c.action == "linked" and c.target == previous]
            changes = changes or [c for c in memory.link_history if c.action == "linked" and c.target in ids]
            link = _link_change(changes[-1]) if changes else {"action": "linked", "how": "", "detail": "",
                                                                  "by": "", "at": "", "target": previous}
        steps.append({"id": memory_id, "snippet": _snippet(memory.content), "author": memory.author,
                      "created": iso(memory.created), "link": link})
        previous = memory_id
    return steps


def _link_change(change) -> dict:
    return {"action": change.action, "target": change.target, "by": change.by, "at": iso(change.at),
            "how": change.how, "detail": change.detail}


# -- Lifecycle -----------------------------------------------------------------------------------------------

def lifecycle(view) -> dict:
    memory, names, name = _collection(view)
    data = {"collections": names, "collection": name, "private": False, "consolidated": [], "consolidated_count": 0,
            "due": [], "due_count": 0, "expired": [], "expired_count": 0, "links": [], "preview": None}
    if not memory.exists(name):
        return data
    private = memory.private(name)
    now = time.time()
    heads = memory.visible_heads(name)

    consolidated = sorted((h for h in heads if h.consolidates), key=lambda h: h.updated, reverse=True)
    data["consolidated_count"] = len(consolidated)
    data["consolidated"] = _with_members(memory, name, consolidated[:LIST_LIMIT])

    due, expired = memory.due(name, now)
    due = sorted(due, key=lambda h: h.review_after)  # the longest overdue first
    expired = sorted(expired, key=lambda h: h.valid_until, reverse=True)  # the latest to expire first
    data["due_count"], data["expired_count"] = len(due), len(expired)
    data["due"] = _listed(memory, name, due[:LIST_LIMIT], "review_after")
    data["expired"] = _listed(memory, name, expired[:LIST_LIMIT], "valid_until")

    data["links"] = _recent_links(memory, name, heads)
    data["private"] = private
    if view.param("preview") == "1":
        data["preview"] = {"available": False, "note": "Consolidation is not previewed in a private collection: "
                                                        "session turns are never consolidated."} if private \
            else _preview(memory, name)
    return data


def _with_members(door, name: str, heads: list) -> list[dict]:
    """Consolidated memories, each with the start of its text and of its first members'."""
    member_ids = [m for h in heads for m in h.consolidates[:MEMBERS_SHOWN]]
    texts = _snippets(door, name, [h.id for h in heads] + member_ids)
    return [{"id": h.id, "project": h.project, "author": h.author, "updated": iso(h.updated),
             "snippet": texts.get(h.id, ""), "count": len(h.consolidates),
             "members": [{"id": m, "snippet": texts.get(m)} for m in h.consolidates[:MEMBERS_SHOWN]]}
            for h in heads]


def _listed(door, name: str, heads: list, when: str) -> list[dict]:
    texts = _snippets(door, name, [h.id for h in heads])
    return [{"id": h.id, "project": h.project, "type": h.type, "author": h.author, "snippet": texts.get(h.id, ""),
             "when": _date(getattr(h, when))} for h in heads]


def _recent_links(door, name: str, heads: list) -> list[dict]:
    """The latest supersession links and unlinks, with how and why. Links are made when the newer memory is
    stored, so the newest memories that hold links hold the latest ones; only those are read from the log."""
    holders = sorted((h for h in heads if h.supersedes), key=lambda h: h.created, reverse=True)[:LIST_LIMIT]
    newer = {m.id: m for m in door.get_many(name, [h.id for h in holders])}
    changes = [(m, c) for m in newer.values() for c in m.link_history]
    changes.sort(key=lambda mc: mc[1].at, reverse=True)
    changes = changes[:LIST_LIMIT]
    texts = _snippets(door, name, [c.target for _, c in changes])
    return [{**_link_change(c), "id": m.id, "snippet": _snippet(m.content), "target_snippet": texts.get(c.target),
             "current": c.target in m.supersedes} for m, c in changes]


def _preview(door, name: str) -> dict:
    """What a consolidation of every author's memories would gather now (lifecycle/consolidation.py, dry run:
    nothing is written)."""
    report = door.consolidation_preview(name, now=time.time())
    clusters = [c for c in report.clusters if c.action != "unchanged"]
    shown = clusters[:LIST_LIMIT]
    texts = _snippets(door, name, [m for c in shown for m in c.members[:MEMBERS_SHOWN]])
    return {"available": True, "count": len(clusters), "unchanged": len(report.clusters) - len(clusters),
            "seconds": round(report.seconds, 2),
            "clusters": [{"id": c.id, "project": c.project, "author": c.author, "action": c.action,
                          "preview": c.preview, "size": len(c.members),
                          "members": [{"id": m, "snippet": texts.get(m)} for m in c.members[:MEMBERS_SHOWN]]}
                         for c in shown]}


def _snippets(door, name: str, ids: list[str]) -> dict[str, str]:
    """The start of each live memory's text (those the viewer may see), read from the log in one pass."""
    return {m.id: _snippet(m.content) for m in door.get_many(name, list(dict.fromkeys(ids)))}


def _snippet(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= SNIPPET_CHARS else text[:SNIPPET_CHARS - 1] + "…"


def _date(ts) -> str:
    return iso(ts)[:16].replace("T", " ") + " UTC" if ts else ""


def register(register):
    register("overview", title="Overview", template=_template("overview.html"), context=overview, order=10)
    register("memories", title="Memories", template=_template("memories.html"), context=browse, order=20)
    register("lifecycle", title="Lifecycle", template=_template("lifecycle.html"), context=lifecycle, order=30)
