"""memory_search: hybrid search of one collection (and, when asked, the caller's own session turns)."""

from __future__ import annotations

import time

from persmem_core.sdk import CallContext, UserError

from ..access import AgentMemory
from ..search.replies import LifecycleLinks, lifecycle_marks, search_reply
from ..service import check_collection_name
from ..sessions_answers import SESSIONS, session_hits, turn_fields
from ..store.query import Filters, did_you_mean, parse_filters, shown
from .arguments import Tags, caller_memory

MAX_TOP_K = 20
SEARCHED_QUERY_CHARS = 1000  # a query's start that is searched, by words and by meaning (about one model window)


def memory_search(
    query: str,
    top_k: int = 5,
    project: str = "",
    memory_type: str = "",
    collection: str = "memories",
    tags: Tags = "",
    author: str = "",
    since: str = "",
    until: str = "",
    recency_weight: float = 0.0,
    mode: str = "hybrid",
    verbose: bool = False,
    include_sessions: bool = False,
    include_superseded: bool = True,
    include_expired: bool = False,
    call: CallContext = None,
) -> dict:
    """Search memories by meaning and words, best first; only the query's first 1000 characters are used.
    top_k: 1-20 (weak hits dropped). Filters: project, memory_type, author, tags ("a,b" or a list; any),
    since / until (ISO). recency_weight 0-1. mode: hybrid, dense or lexical. include_sessions: also your past
    sessions' turns. Superseded memories rank lower, marked superseded_by; expired ones only with
    include_expired; nothing is ever deleted. Long memories show their best passage (memory_get: whole)."""
    _check_search(query, top_k, mode, recency_weight)
    asked = parse_filters(project=project, memory_type=memory_type, author=author, tags=tags, since=since,
                          until=until)
    memory = caller_memory(call)
    config = call.host.section("memory")
    if not memory.exists(collection):
        check_collection_name(collection)
        if not include_sessions:
            reply = search_reply(query, collection, [], config, searched_chars=SEARCHED_QUERY_CHARS)
            return {**reply, "hint": did_you_mean("collection", collection, memory.names())}
    start = time.perf_counter()
    hits = memory.search(collection, query[:SEARCHED_QUERY_CHARS], filters=asked, top_k=top_k, mode=mode,
                         recency_weight=recency_weight, include_superseded=include_superseded,
                         include_expired=include_expired)
    if include_sessions and collection != SESSIONS:
        turns = session_hits(memory, query[:SEARCHED_QUERY_CHARS], top_k=top_k, filters=asked)
        hits = sorted([*hits, *turns], key=lambda hit: hit.score, reverse=True)[:top_k]
    took_ms = round((time.perf_counter() - start) * 1000, 2)
    reply = search_reply(query, collection, hits, config, searched_chars=SEARCHED_QUERY_CHARS, verbose=verbose,
                         took_ms=took_ms, marks=_marks(memory, collection, include_sessions))
    # What the caller was shown counts as retrieved; your own memories' rank is not raised by your own searches.
    memory.record_retrievals(collection, [item["id"] for item in reply["results"] if not item.get("session_turn")])
    _add_notes(reply, memory, collection, mode, hits, asked)
    return reply


def _check_search(query, top_k: int, mode: str, recency_weight: float) -> None:
    if not isinstance(query, str) or not query.strip():
        raise UserError("query is empty; describe what to look for.")
    if not 1 <= top_k <= MAX_TOP_K:
        raise UserError(f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}.")
    if mode not in ("hybrid", "dense", "lexical"):
        raise UserError(f"mode must be hybrid, dense or lexical, got {shown(mode)}.")
    if not 0.0 <= recency_weight <= 1.0:
        raise UserError(f"recency_weight must be between 0 and 1, got {recency_weight}.")


def _add_notes(reply: dict, memory: AgentMemory, collection: str, mode: str, hits: list, asked: Filters) -> None:
    """Say when memories stored moments ago are still being indexed by meaning (the search waited [memory]
    search_waits_ms for them), and why a filtered search found nothing (the closest existing names)."""
    waiting = 0 if mode == "lexical" else memory.unembedded_count(collection)
    if waiting:
        lag = (f"{waiting} memories stored moments ago are still being indexed by meaning: until then they are "
               "found by keyword only.")
        reply["note"] = f"{reply['note']} {lag}" if reply.get("note") else lag
    if not hits and asked.active() and memory.exists(collection):
        hint = unknown_names_hint(memory, collection, asked)
        if hint:
            reply["hint"] = hint


def _marks(memory: AgentMemory, collection: str, include_sessions: bool):
    """What marks a result of memory_search: the lifecycle's marks (each collection's own links), and a session
    turn's session, client, index and role."""
    links: dict[str, LifecycleLinks] = {}
    now = time.time()

    def marks(found_memory) -> dict:
        if found_memory.collection not in links:
            links[found_memory.collection] = memory.links(found_memory.collection, now)
        found = lifecycle_marks(found_memory, links[found_memory.collection])
        if include_sessions and found_memory.collection == SESSIONS and collection != SESSIONS:
            found.update(session_turn=True, **turn_fields(found_memory))
        return found

    return marks


def unknown_names_hint(memory: AgentMemory, collection: str, filters: Filters) -> str | None:
    """Why a filtered search or count found nothing, when a filter names what no memory uses: the closest
    existing names. None when every name exists (nothing matched them all together)."""
    used = memory.names_in_use(collection)
    hints = [did_you_mean(what, value, used[what])
             for what, value in (("project", filters.project), ("memory_type", filters.type),
                                 ("author", filters.author)) if value and value not in used[what]]
    if filters.tags and not any(tag in used["tag"] for tag in filters.tags):
        hints += [did_you_mean("tag", tag, used["tag"]) for tag in filters.tags[:3]]
    return " ".join(hints) or None
