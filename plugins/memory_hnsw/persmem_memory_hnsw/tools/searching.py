"""memory_search: hybrid search of one collection (and, when asked, the caller's own session turns)."""

from __future__ import annotations

import time

from persmem_core.sdk import CallContext, UserError

from ..access import AgentMemory
from ..search.replies import LifecycleLinks, lifecycle_marks, search_reply
from ..service import check_collection_name
from ..sessions_answers import SESSIONS, session_hits, turn_fields
from ..store.query import Filters, did_you_mean, parse_filters, shown
from .arguments import caller_memory

MAX_TOP_K = 20
SEARCHED_QUERY_CHARS = 4000  # a query's start that is searched (the embedder reads fewer tokens still)


def memory_search(
    query: str,
    top_k: int = 5,
    project: str | None = None,
    memory_type: str | None = None,
    collection: str = "memories",
    tags: str | None = None,
    author: str | None = None,
    since: str | None = None,
    until: str | None = None,
    recency_weight: float = 0.0,
    mode: str = "hybrid",
    verbose: bool = False,
    include_sessions: bool = False,
    include_superseded: bool = True,
    include_expired: bool = False,
    call: CallContext = None,
) -> dict:
    """Find memories by meaning and by words (hybrid semantic + BM25 search), best first.

    - query: what you are looking for, in natural language or keywords (the first 4000 characters are searched).
    - top_k: at most how many results (1-20). Results far weaker than the best one are left out, and the reply
      is kept to about 10,000 characters, so you may get fewer (the reply's `note` says when some were left out).
    - project, memory_type, author: exact filters; tags: comma-separated, any may match. A name that does not
      exist gets an empty result with a `hint` naming the closest existing ones.
    - since / until: ISO dates or times (2026-11-01, 2026-11-01T09:30:00Z) bounding when the memory was stored;
      a date alone as until includes that whole day. since after until is refused.
    - recency_weight: 0 (default) ignores age; up to 1 favours recent memories.
    - mode: "hybrid" (default), "dense" (meaning only) or "lexical" (words only).
    - verbose: also return internals (content_hash, distance, lexical_score, editor, timings); rarely useful.
    - include_sessions: also search your own past sessions' turns (what you and the user said in Claude Code or
      Codex sessions, archived by the sessions plugin), with the same filters; they are merged with the memories
      by score and marked with session_id, index (the turn's place in the session), client and role.
      session_read(session_id, offset=index) shows the conversation around one. Only your own sessions.
    - include_superseded: true (default) also returns memories a later one replaced, ranked lower and marked
      superseded_by (the successor's id); false leaves them out. include_expired: also return memories past
      their valid_until, marked expired (hidden by default).
    Returns {"query" (cut when long), "collection", "count", "results", "note"?, "hint"?}. Each result has id,
    score (1 = the best match), content, project, type, tags, author, created, updated, version. A long memory's
    content is its best matching passage, with truncated=true, full_chars and shown_chars (start, end);
    memory_get(memory_id) returns the whole memory. Marks, only when they apply: superseded_by / supersedes
    (ids: the newer statement wins), consolidated_into / consolidates (a consolidated memory and how many it
    gathers), confidence (0-1, from memory_validate feedback), expired, review_due.
    Nothing is ever deleted by these marks: memory_get shows a memory's links and history.
    """
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
        turns = session_hits(memory, query, top_k=top_k, filters=asked)
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
