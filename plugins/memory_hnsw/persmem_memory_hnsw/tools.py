"""The memory tools, with persMEM's names, argument names and defaults (plus a few more).

Results are JSON objects. The author of a memory is always the calling
agent (from its credentials), never an argument.
"""

from __future__ import annotations

import itertools
import json
import time

from persmem_core.sdk import CallContext, UserError

from .collection import NewMemory
from .store.contexts import CONTEXT_CHARS_PER_SIDE, conversation_contexts
from .search.weighing import expired, review_due
from .permissions import (BOOTSTRAP_TYPES, check_bootstrap_owner, check_visible, editors_in, is_private, own_filters,
                          pinned_for, visible_to)
from .store.query import Filters, did_you_mean, parse_created, parse_filters, parse_label, parse_tags, parse_when, shown
from .store.records import ID_RE, iso, new_id, public, public_version, summarize
from .search.replies import LifecycleLinks, consolidation_reply, lifecycle_marks, memory_list, search_reply
from .service import MemoryService, check_collection_name, service
from .sessions_answers import SESSIONS, session_hits, turn_fields

MAX_TOP_K = 20
MAX_LINKED_IDS = 20  # ids one memory_store may name in supersedes
CHAIN_SHOWN = 21  # steps of a supersession chain memory_get shows: the memory and the 20 nearest around it
SEARCHED_QUERY_CHARS = 4000  # a query's start that is searched (the embedder reads fewer tokens still)
# Consolidated memories get the id "con_" + their first member's id (consolidate.consolidated_id), which anyone
# can compute: a caller-chosen id with that prefix could take the id of another agent's consolidated memory.
CONSOLIDATED_ID_PREFIX = "con_"


def _service(call: CallContext) -> MemoryService:
    return service(call.host)


def memory_store(
    content: str,
    project: str = "general",
    tags: str = "",
    memory_type: str = "session_note",
    collection: str = "memories",
    memory_id: str | None = None,
    dedup: bool = True,
    supersedes: str | list[str] = "",
    valid_until: str = "",
    review_after: str = "",
    call: CallContext = None,
) -> dict:
    """Store one memory (a fact, decision, handoff, bug, pattern...) so any later session can find it.

    - content: the text to remember; long text is kept whole and every part stays searchable.
    - project: groups memories ("general" by default); memory_search can filter on it.
    - tags: comma-separated labels, e.g. "auth,jwt".
    - memory_type: session_note, decision, handoff, bug, pattern, preference, identity, directive, ...
      project, tags and memory_type are short labels: 1-64 characters of one line each, no line breaks, tabs
      or other control or invisible characters (refused, with the cleaned label suggested).
    - memory_id: optional id of your choosing; by default one is generated. Not in a private collection
      (like `sessions`): there the server gives every id, so leave it empty. Ids starting with "con_" are
      reserved for consolidated memories.
    - dedup: when an identical or near-identical memory exists in the project, its id is returned
      with status "duplicate" instead of storing a copy (nothing is ever deleted).
    - supersedes: when this memory replaces older ones you know of (a fact that changed: "staging moved from
      Postgres to SQLite"), their ids, comma-separated ("id1,id2"). They stay stored and readable, but rank
      below this one and are marked superseded_by it in searches. Only memories you may change (your own,
      or granted), in the same collection.
    - valid_until: an ISO date or time (2026-12-31) after which this memory is expired: hidden from searches
      unless asked for (a date alone means through that day). review_after: after it, the memory is marked
      review_due (still found), to be checked.
    The memory is stored (durably) when this returns and found by keyword at once; its meaning is indexed a
    moment later, and a memory_search waits for that. When you restate something you stored earlier in the same
    project without naming it in supersedes, the server may then link the two itself: memory_get shows the link
    (how: "detected", the similarity and the shared words); if it is wrong, memory_unlink(memory_id=<this id>)
    undoes it. Returns {"status": "stored"|"duplicate", "id": ..., "supersedes"?: [...]} (`supersedes`: the
    links you asked for). The author is you (the calling agent).
    """
    config = call.host.section("memory")
    if memory_id:
        _check_id_allowed(config, collection, "memory_id")
        _check_not_reserved(memory_id, "memory_id")
    memory_type = parse_label(memory_type, "memory_type")
    item = NewMemory(content=content, project=parse_label(project, "project"), type=memory_type,
                     tags=parse_tags(tags), memory_id=memory_id,
                     supersedes=parse_ids(supersedes, "supersedes"),
                     valid_until=parse_date(valid_until, "valid_until") or 0.0,
                     review_after=parse_date(review_after, "review_after") or 0.0,
                     # One curated memory may restate an older one (Collection._may_detect says where it applies).
                     detect_supersession=True)
    col = _service(call).collection(collection, create=True)  # a new name is made (within [memory] max_collections)
    result = col.store([item], author=call.agent, dedup=dedup, editors=editors_in(config, collection))[0]
    return _explain_links(result, item.supersedes)


def _explain_links(result: dict, asked: list[str]) -> dict:
    """A store result that made a link says how to undo it (a detected link is the server's guess); one that
    stored nothing (a duplicate) says the links `asked` for were not made."""
    if result["status"] == "duplicate" and asked:
        result["note"] = (f"Nothing was stored (a duplicate of {result['id']}), so no supersedes link was made; "
                          "call memory_store again with dedup=false to store it and make the links.")
        return result
    links = result.get("supersedes")
    if links:
        detected = [link["id"] for link in links if link.get("how") == "detected"]
        result["note"] = (
            f"This memory supersedes {', '.join(link['id'] for link in links)}: "
            f"{'that memory' if len(links) == 1 else 'those memories'} now rank below it, marked superseded_by "
            f"{result['id']} (nothing is deleted). "
            + (f"The link to {', '.join(detected)} was detected (a restatement of the same subject); if it is "
               f"wrong, memory_unlink(memory_id={result['id']!r}) undoes it." if detected else
               f"memory_unlink(memory_id={result['id']!r}) undoes it."))
    return result


def parse_ids(value: str | list[str] | None, what: str) -> list[str]:
    """Memory ids given as "id1,id2" or a list, stripped, without repeats; each must be a well-formed id."""
    if value is None:
        return []
    if not isinstance(value, (str, list)) or not all(isinstance(item, str) for item in value):
        raise UserError(f"{what} must be memory ids, comma-separated (\"id1,id2\") or a list of strings.")
    items = value.split(",") if isinstance(value, str) else value
    ids = list(dict.fromkeys(item.strip() for item in items if item.strip()))
    if len(ids) > MAX_LINKED_IDS:
        raise UserError(f"{what} names {len(ids)} memories; at most {MAX_LINKED_IDS} in one call.")
    for memory_id in ids:
        if not ID_RE.match(memory_id):
            raise UserError(f"{what}: {shown(memory_id)} is not a memory id (1-128 letters, digits, '_', ':', '.', "
                            "'-'); memory_search finds ids.")
    return ids


def parse_date(value: str | None, what: str, *, clearable: bool = False) -> float | None:
    """A valid_until / review_after as a timestamp: None when not given; with `clearable` (memory_update),
    "none" clears it (0.0). A date alone means the end of that day (valid_until=2026-12-31 is valid all
    that day)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise UserError(f"{what} must be an ISO date or time as a string, like \"2026-12-31\".")
    if value.strip().casefold() == "none":
        if clearable:
            return 0.0
        raise UserError(f"{what}=\"none\" only clears a date in memory_update; here leave {what} empty for no date.")
    return parse_when(value.strip(), what, through_day=True)


def _check_id_allowed(config, collection: str, field: str) -> None:
    """Refuse an id the caller chose in a private collection. There another agent's entries are invisible, so
    an id of theirs could neither be reported as taken (that would tell their turns exist: session turn ids
    can be computed) nor taken by the caller (their indexing would then skip that turn). The refusal is the
    same whether the id is taken or not."""
    if is_private(config, collection):
        raise UserError(f"{field} cannot be chosen in collection {collection!r}: ids in a private collection are "
                        f"given by the server. Leave {field} empty; the reply names the id stored.")


def _check_not_reserved(memory_id: str, field: str) -> None:
    """Refuse a chosen id that only the consolidation gives (CONSOLIDATED_ID_PREFIX)."""
    if memory_id.startswith(CONSOLIDATED_ID_PREFIX):
        raise UserError(f"{field} {shown(memory_id)} starts with {CONSOLIDATED_ID_PREFIX!r}, which is reserved for "
                        "consolidated memories (memory_consolidate names them). Choose an id without that prefix, "
                        f"or leave {field} empty and the server gives one.")


def memory_bulk_store(
    chunks: str | list,
    project: str = "general",
    collection: str = "memories",
    dedup: bool = True,
    context_chars: int = 300,
    call: CallContext = None,
) -> dict:
    """Store many memories in one call: `chunks` is a JSON array (or a list) of
    {"content": ..., "tags": "a,b" or [...], "type": ..., "project": ..., "id": ..., "created": ...} objects; only
    content is required ("id" is refused in a private collection like `sessions`, where the server gives every id).
    "created" is when it was said or written, an ISO date or time like 2023-05-08 or 2023-05-08T13:56:00Z
    (default: now): importing a conversation with its dates lets a search that names a time ("what did she
    paint in May 2023?") find it, and since/until filter on it.
    All are written together (one durable write). Returns one {"status", "id"} per chunk, in order.

    Chunks are taken as consecutive pieces of one conversation or document: up to `context_chars` characters
    of the chunks before and after each one (in the same project) are indexed with it for keyword search (not
    part of its content), so a turn like "Yes, a sunrise over the lake." is found by the words of the question before it
    (a chunk right after a question counts the question's words in full).
    Pass context_chars=0 when the chunks are unrelated notes."""
    if isinstance(chunks, str):
        try:
            chunks = json.loads(chunks)
        except json.JSONDecodeError as exc:
            raise UserError(f"chunks is not valid JSON ({exc}); pass a JSON array of objects with a 'content' field.") from None
        except RecursionError:
            raise UserError("chunks is nested too deeply to read; pass a flat JSON array of objects like "
                            "{\"content\": \"...\"}.") from None
    if not isinstance(chunks, list) or not chunks:
        raise UserError("chunks must be a non-empty JSON array of objects like {\"content\": \"...\"}.")
    if len(chunks) > 1000:
        raise UserError(f"{len(chunks)} chunks in one call; send at most 1000 per call.")
    if not 0 <= context_chars <= CONTEXT_CHARS_PER_SIDE:
        raise UserError(f"context_chars must be 0-{CONTEXT_CHARS_PER_SIDE}, got {context_chars}.")
    items = []
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("content"), str):
            raise UserError(f"chunks[{i}] must be an object with a string 'content'.")
        for key in ("project", "type", "memory_type", "id", "created"):
            if chunk.get(key) is not None and not isinstance(chunk[key], str):
                raise UserError(f"chunks[{i}].{key} must be a string, got {type(chunk[key]).__name__} "
                                f"{json.dumps(chunk[key])[:40]}; leave it out to use the default.")
        if chunk.get("id"):
            _check_id_allowed(call.host.section("memory"), collection, f"chunks[{i}].id")
            _check_not_reserved(chunk["id"], f"chunks[{i}].id")
        items.append(NewMemory(
            content=chunk["content"],
            project=parse_label(chunk.get("project") or project, f"chunks[{i}].project"),
            type=parse_label(chunk.get("type") or chunk.get("memory_type") or "session_note", f"chunks[{i}].type"),
            tags=parse_tags(chunk.get("tags"), f"chunks[{i}].tags"),
            memory_id=chunk.get("id"),
            created=parse_created(chunk.get("created"), f"chunks[{i}].created"),
        ))
    if context_chars:
        for _, run in itertools.groupby(items, key=lambda item: item.project):  # another project's chunk is no context
            run = list(run)
            for item, (context, question) in zip(run, conversation_contexts([x.content for x in run], context_chars),
                                                 strict=True):
                item.context, item.reply_to = context, question
    results = _service(call).collection(collection, create=True).store(items, author=call.agent, dedup=dedup)
    return {"stored": sum(r["status"] == "stored" for r in results), "results": results}


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
    if not isinstance(query, str) or not query.strip():
        raise UserError("query is empty; describe what to look for.")
    if not 1 <= top_k <= MAX_TOP_K:
        raise UserError(f"top_k must be between 1 and {MAX_TOP_K}, got {top_k}.")
    if mode not in ("hybrid", "dense", "lexical"):
        raise UserError(f"mode must be hybrid, dense or lexical, got {shown(mode)}.")
    if not 0.0 <= recency_weight <= 1.0:
        raise UserError(f"recency_weight must be between 0 and 1, got {recency_weight}.")
    asked = parse_filters(project=project, memory_type=memory_type, author=author, tags=tags, since=since,
                          until=until)
    memories = _service(call)
    config = call.host.section("memory")
    collections = memories.collections()
    if collection not in collections:
        check_collection_name(collection)
        if not include_sessions:
            reply = search_reply(query, collection, [], config, searched_chars=SEARCHED_QUERY_CHARS)
            return {**reply, "hint": did_you_mean("collection", collection, collections)}
    filters = own_filters(config, collection, call.agent, asked)  # None: another's entries of a private one
    col = collections.get(collection)
    start = time.perf_counter()
    hits = [] if filters is None or col is None else col.search(
        query[:SEARCHED_QUERY_CHARS], top_k=top_k, filters=filters, mode=mode, recency_weight=recency_weight,
        include_superseded=include_superseded, include_expired=include_expired)
    if include_sessions and collection != SESSIONS:
        turns = session_hits(memories, call.agent, query, top_k=top_k, filters=asked)
        hits = sorted([*hits, *turns], key=lambda hit: hit.score, reverse=True)[:top_k]
    took_ms = round((time.perf_counter() - start) * 1000, 2)
    reply = search_reply(query, collection, hits, config, searched_chars=SEARCHED_QUERY_CHARS, verbose=verbose,
                         took_ms=took_ms, marks=_marks(memories, collection, include_sessions))
    if col is not None:  # what the caller was shown counts as retrieved (best-effort statistics, never logged)
        col.record_retrievals([item["id"] for item in reply["results"] if not item.get("session_turn")],
                              by=call.agent)  # your own memories' rank is not raised by your own searches
    # In a private collection only the caller's own count: the others' would say how much they are writing.
    waiting = 0 if col is None or mode == "lexical" else col.unembedded_count(
        call.agent if is_private(config, collection) else None)
    if waiting:  # the search waited [memory] search_waits_ms for them, and a bulk store is still being embedded
        lag = (f"{waiting} memories stored moments ago are still being indexed by meaning: until then they are "
               "found by keyword only.")
        reply["note"] = f"{reply['note']} {lag}" if reply.get("note") else lag
    if not hits and asked.active() and col is not None:
        hint = _unknown_names_hint(col, asked, config, call.agent)
        if hint:
            reply["hint"] = hint
    return reply


def _marks(memories: MemoryService, collection: str, include_sessions: bool):
    """What marks a result of memory_search: the lifecycle's marks (each collection's own links), and a session
    turn's session, client, index and role."""
    links: dict[str, LifecycleLinks] = {}
    now = time.time()

    def marks(memory) -> dict:
        if memory.collection not in links:
            rows = memories.collection(memory.collection, create=False).rows
            links[memory.collection] = LifecycleLinks(rows.successor_of, rows.consolidated_into, now)
        found = lifecycle_marks(memory, links[memory.collection])
        if include_sessions and memory.collection == SESSIONS and collection != SESSIONS:
            found.update(session_turn=True, **turn_fields(memory))
        return found

    return marks


def _names_in_use(col, config, agent: str) -> dict[str, set[str]]:
    """The names a collection's memories use, as `agent` may see them (its own only, in a private one)."""
    if not is_private(config, col.name):
        return col.names_in_use()
    used = {"project": set(), "memory_type": set(), "author": set(), "tag": set()}
    for m in col.matching(Filters(author=agent)):
        used["project"].add(m.project)
        used["memory_type"].add(m.type)
        used["author"].add(m.author)
        used["tag"].update(m.tags)
    return used


def _unknown_names_hint(col, filters: Filters, config, agent: str) -> str | None:
    """Why a filtered search or count found nothing, when a filter names what no memory uses: the closest
    existing names. None when every name exists (nothing matched them all together)."""
    used = _names_in_use(col, config, agent)
    hints = [did_you_mean(what, value, used[what])
             for what, value in (("project", filters.project), ("memory_type", filters.type),
                                 ("author", filters.author)) if value and value not in used[what]]
    if filters.tags and not any(tag in used["tag"] for tag in filters.tags):
        hints += [did_you_mean("tag", tag, used["tag"]) for tag in filters.tags[:3]]
    return " ".join(hints) or None


def memory_get(memory_id: str, collection: str = "memories", include_history: bool = False,
               call: CallContext = None) -> dict:
    """Read one memory by id, with where it stands: superseded_by (the later memory that replaced it, if any),
    supersedes, chain (the ids of the chain of restatements, oldest first; of a long one the 21 around this
    memory, with chain_length and chain_older_left_out / chain_newer_left_out), consolidated_into /
    consolidates, confidence (0-1, 0.5 with no feedback) and feedback counts, retrievals (how often searches
    returned it), tier (episodic, semantic or procedural), valid_until / review_after, expired, review_due.
    With include_history, also its previous versions (oldest first), its link_history (each link made or
    undone: by whom, when, how, why) and its feedback entries. `author` is who wrote the memory, `editor` who
    made each version (null: not recorded, an older store). A superseded memory stays readable here, whole."""
    col = _service(call).collection(collection)
    if memory_id in col.rows.unembedded:  # just stored: a link its embedding may make is part of the answer
        col.wait_embedded(col.config.search_waits_ms / 1000.0)
    memory = col.get(memory_id)
    check_visible(call.host.section("memory"), collection, call.agent, memory, memory_id)
    result = public(memory)
    result.update(_lifecycle_fields(col.lifecycle_of(memory_id), memory_id))
    if include_history:
        result["history"] = [public_version(v) for v in memory.history]
        result["link_history"] = [{"action": c.action, "target": c.target, "by": c.by, "at": iso(c.at),
                                   "how": c.how, **({"detail": c.detail} if c.detail else {})}
                                  for c in memory.link_history]
        result["feedback_entries"] = [{"by": f.by, "at": iso(f.at), "helpful": f.helpful,
                                       **({"note": f.note} if f.note else {})} for f in memory.feedback]
    return result


def _lifecycle_fields(state: dict, memory_id: str) -> dict:
    """Collection.lifecycle_of as a reply shows it: times in ISO, a date that is not set as null, a long chain
    cut to the CHAIN_SHOWN steps nearest the memory (with how many older and newer ones are left out)."""
    fields = dict(state)
    for key in ("valid_until", "review_after", "last_retrieved"):
        fields[key] = iso(fields[key]) if fields.get(key) else None
    chain = fields["chain"]
    if len(chain) > CHAIN_SHOWN:
        at = chain.index(memory_id)
        start = max(0, min(at - CHAIN_SHOWN // 2, len(chain) - CHAIN_SHOWN))
        fields["chain"] = chain[start : start + CHAIN_SHOWN]
        fields["chain_length"] = len(chain)
        fields["chain_older_left_out"] = start
        fields["chain_newer_left_out"] = len(chain) - start - CHAIN_SHOWN
    return fields


def memory_update(memory_id: str, content: str | None = None, tags: str | None = None,
                  memory_type: str | None = None, project: str | None = None, collection: str = "memories",
                  valid_until: str | None = None, review_after: str | None = None,
                  call: CallContext = None) -> dict:
    """Change a memory's content, tags, type, project, valid_until or review_after. The previous version is kept
    (memory_get with include_history=true shows it, with who made each version) and the version number goes up.
    Pass only what changes. valid_until / review_after: an ISO date or time (2026-12-31: through that day),
    "none" to clear it, empty to leave it. You may change memories you wrote; others' only if the operator
    granted it ([memory] editors), and identity and directive entries only their author.
    A fact that changed is often better stored anew with memory_store(supersedes=<this id>): the old statement
    then stays readable as history of what was true before."""
    until, review = parse_date(valid_until, "valid_until", clearable=True), parse_date(
        review_after, "review_after", clearable=True)
    if content is None and tags is None and memory_type is None and project is None and until is None \
            and review is None:
        raise UserError("nothing to update: pass content, tags, memory_type, project, valid_until or review_after.")
    col = _service(call).collection(collection)
    config = call.host.section("memory")
    check_visible(config, collection, call.agent, col.memories.get(memory_id), memory_id)
    memory = col.update(
        memory_id, editor=call.agent, editors=editors_in(config, collection), content=content,
        tags=None if tags is None else parse_tags(tags),
        type=None if memory_type is None else parse_label(memory_type, "memory_type"),
        project=None if project is None else parse_label(project, "project"),
        valid_until=until, review_after=review,
    )
    reply = {"status": "updated", **public(memory)}
    for key in ("valid_until", "review_after"):
        if getattr(memory, key):
            reply[key] = iso(getattr(memory, key))
    return reply


def memory_delete(memory_id: str, collection: str = "memories", call: CallContext = None) -> dict:
    """Delete one memory by id (it stops appearing in searches; the deletion is logged with your name).
    You may delete memories you wrote; others' only if the operator granted it ([memory] editors), and identity
    and directive entries only their author."""
    col = _service(call).collection(collection)
    config = call.host.section("memory")
    check_visible(config, collection, call.agent, col.memories.get(memory_id), memory_id)
    memory = col.delete(memory_id, by=call.agent, editors=editors_in(config, collection))
    return {"status": "deleted", "id": memory.id}


def memory_validate(memory_id: str, helpful: bool, note: str = "", collection: str = "memories",
                    call: CallContext = None) -> dict:
    """Say whether a memory helped (helpful=true) or was wrong, outdated or useless (helpful=false), after you
    used it. Each agent's latest verdict counts once toward the memory's confidence, (1 + helpful) / (2 +
    helpful + unhelpful) over the agents' verdicts; confidence nudges its search rank up or down a little
    (bounded: no agent can bury another's memory; one agent alone moves it by a few percent). Any memory you can
    see; on your own memory your verdict only answers the others' (it can even them out, never go past).
    note: why, up to 500 characters (kept with your name and the time; memory_get with include_history shows
    the entries). A memory that is simply no longer true is better replaced: memory_store the current
    fact with supersedes=<its id>. Returns the new confidence and the counts."""
    if not isinstance(helpful, bool):
        raise UserError(f"helpful must be true or false, got {shown(helpful)}.")
    if not isinstance(note, str):
        raise UserError("note must be a string (why the memory helped or not), or empty.")
    col = _service(call).collection(collection)
    config = call.host.section("memory")
    check_visible(config, collection, call.agent, col.memories.get(memory_id), memory_id)
    memory = col.validate(memory_id, by=call.agent, helpful=helpful, note=note)
    state = col.lifecycle_of(memory.id)
    return {"status": "recorded", "id": memory.id, "helpful": helpful, "confidence": round(state["confidence"], 3),
            "feedback": state["feedback"]}


def memory_unlink(memory_id: str, supersedes_id: str = "", collection: str = "memories",
                  call: CallContext = None) -> dict:
    """Undo a supersession link that is wrong (say memory_store detected a restatement that was not one): the
    older memory ranks as before and loses its superseded_by mark. memory_id may be either side: the newer
    memory (then supersedes_id names which of its links to drop; empty drops them all) or the older one (the
    link naming it is dropped). Nothing is deleted; the undoing is recorded in the newer memory's link_history
    (memory_get with include_history). Allowed to the author of either memory, or an agent granted over either
    author ([memory] editors)."""
    supersedes_id = (supersedes_id or "").strip()
    for value, what in ((memory_id, "memory_id"), (supersedes_id, "supersedes_id")):
        if value and not ID_RE.match(value):
            raise UserError(f"{what}: {shown(value)} is not a memory id; memory_get(memory_id) shows its links.")
    col = _service(call).collection(collection)
    config = call.host.section("memory")
    check_visible(config, collection, call.agent, col.memories.get(memory_id), memory_id)
    # supersedes_id is not looked up: whether it exists is none of the caller's business when it cannot see it
    # (another agent's session turn, whose id can be computed). The store answers from memory_id's own links
    # alone, so a hidden id and a missing one get the same reply.
    newer = col.unlink(memory_id, supersedes_id=supersedes_id or None, by=call.agent,
                       editors=editors_in(config, collection))
    last = newer.link_history[-1].at if newer.link_history else None
    undone = [c.target for c in newer.link_history if c.action == "unlinked" and c.at == last]
    return {"status": "unlinked", "id": newer.id, "unlinked": undone, "supersedes": list(newer.supersedes)}


def memory_consolidate(collection: str = "memories", project: str | None = None, dry_run: bool = True,
                       call: CallContext = None) -> dict:
    """Group mature clusters of your own similar memories (older than [memory] consolidate_min_age_days, in one
    project) into one consolidated memory each: their representative statements, merged tags, and links to
    every member. Extractive and deterministic (no rewording, no model): running it again changes nothing
    unless new memories joined a cluster. Members are never deleted: they stay searchable, rank a little below
    their consolidated memory, and say consolidated_into. dry_run=true (the default) only shows the clusters
    it would make; call again with dry_run=false to write them. Only your own memories; project narrows it.
    Returns {"dry_run", "created", "grown", "clusters": [{id, project, members, action, preview}], ...}."""
    from .consolidate import consolidate

    check_collection_name(collection)
    config = call.host.section("memory")
    memories = _service(call)
    project = parse_label(project, "project") if project else None
    if collection not in memories.collections():
        return {"collection": collection, "dry_run": dry_run, "created": 0, "grown": 0, "clusters": [],
                "hint": did_you_mean("collection", collection, memories.collections())}
    report = consolidate(memories.collection(collection), config, author=call.agent, project=project,
                         dry_run=dry_run, now=time.time())
    return consolidation_reply(report, collection, dry_run, config.search_reply_chars)


def memory_stats(collection: str = "memories", project: str | None = None, call: CallContext = None) -> dict:
    """Counts for a collection (or one project of it): memories, projects, types, authors, tag distribution,
    sizes, oldest/newest, and the lifecycle: superseded (replaced by a later memory), consolidated (gathered into
    a consolidated memory), expired (past valid_until) and review_due (past review_after). A collection or
    project that does not exist gives count 0 and a `hint` naming the closest existing ones."""
    memories = _service(call)
    collections = memories.collections()
    if collection not in collections:
        check_collection_name(collection)
        return {"collection": collection, "count": 0, "projects": {}, "types": {}, "tags": {},
                "hint": did_you_mean("collection", collection, collections)}
    col = collections[collection]
    config = call.host.section("memory")
    heads = col.matching(Filters(author=call.agent if is_private(config, collection) else None, project=project))
    if is_private(config, collection):  # the caller's own entries only (no log size: that counts everyone's)
        stats = {"collection": collection, **summarize(heads), "private": True}
    else:
        stats = col.stats(project)
    for key in ("oldest", "newest"):
        stats[key] = iso(stats[key]) if stats[key] else None
    stats.update(_lifecycle_counts(col, heads, time.time()))
    if project and not stats["count"]:
        stats["hint"] = did_you_mean("project", project, _names_in_use(col, config, call.agent)["project"])
    return stats


def _lifecycle_counts(col, heads, now: float) -> dict:
    """How many of `heads` are superseded, consolidated (gathered into a consolidated memory), expired, or due
    for review at `now`."""
    successor_of, consolidated_into = col.rows.successor_of, col.rows.consolidated_into
    counts = {"superseded": 0, "consolidated": 0, "expired": 0, "review_due": 0}
    for head in heads:
        counts["superseded"] += head.id in successor_of
        counts["consolidated"] += head.id in consolidated_into
        counts["expired"] += expired(head.valid_until, now)
        counts["review_due"] += review_due(head.review_after, now)
    return counts


def memory_list_collections(call: CallContext = None) -> dict:
    """List collections and how many memories each holds. In a private collection (each agent sees only its
    own entries, like `sessions`, your archived session turns) the count is of your own, marked private."""
    config = call.host.section("memory")
    listed = []
    for name, col in sorted(_service(call).collections().items()):
        if is_private(config, name):
            listed.append({"name": name, "count": len(col.matching(Filters(author=call.agent))), "private": True})
        else:
            listed.append({"name": name, "count": len(col.memories)})
    return {"collections": listed}


def chorus_init(agent: str = "", project: str = "general", call: CallContext = None) -> dict:
    """Call once at the start of a session: returns your pinned identity and directive entries, your unread
    messages (from the mail plugin, if installed) and the last 3 handoff memories of `project`.
    Pinned are only the identity and directive entries you wrote (bootstrap_update); never another agent's.
    `agent` may be left empty: you are the calling agent (a different name is refused).
    A long handoff (or pinned entry) shows its start, marked truncated with full_chars; memory_get gives the whole.
    A handoff past its valid_until is left out.
    A project nobody has used yet gets a `hint` naming the closest existing ones."""
    if agent and agent != call.agent:
        raise UserError(f"you are authenticated as {call.agent!r}; chorus_init cannot load {shown(agent)}'s "
                        "session.")
    me = call.agent
    config = call.host.section("memory")
    col = _service(call).collection("memories")
    pinned = col.recent(types=BOOTSTRAP_TYPES, limit=50, predicate=lambda m: pinned_for(me, m))
    now = time.time()
    # The last handoffs, superseded ones included (each is the state of its day), but never an expired one.
    handoffs = col.recent(types={"handoff"}, project=project, limit=3,
                          predicate=lambda m: visible_to(config, "memories", me, m) and not expired(m.valid_until, now))
    inbox = [r for r in call.host.hook.inbox_summary(host=call.host, agent=me) if r is not None]
    pinned = sorted(pinned, key=lambda m: (m.type, m.created))
    # Pinned entries are the agent's own voice: whole when they fit in half the reply budget together.
    pinned_width = max(config.search_passage_chars, config.search_reply_chars // 2 // max(1, len(pinned)))
    reply = {
        "agent": me,
        "project": project,
        "pinned": memory_list(pinned, pinned_width),
        "handoffs": memory_list(handoffs, config.search_passage_chars),
        "inbox": inbox[0] if inbox else {"available": False, "note": "no mail plugin installed"},
    }
    if any(item.get("truncated") for item in (*reply["pinned"], *reply["handoffs"])):
        reply["note"] = "Entries marked truncated show their start only; memory_get(memory_id) returns the whole."
    if not handoffs:
        projects = _names_in_use(col, config, me)["project"]
        if projects and project not in projects:
            reply["hint"] = did_you_mean("project", project, projects)
    return reply


def _free_id(col, base: str, agent: str) -> str:
    """`base`, or `base-2`, `base-3`...: the first that is free or already `agent`'s own."""
    for n in range(1, 1000):
        candidate = base if n == 1 else f"{base}-{n}"
        if candidate not in col.memories or col.memories[candidate].author == agent:
            return candidate
    return f"{base}-{new_id()}"


def bootstrap_update(entry_id: str, content: str, tags: str = "", entry_type: str = "identity",
                     project: str = "general", call: CallContext = None) -> dict:
    """Create or overwrite one of your bootstrap entries (identity, directive, ...) that chorus_init returns to
    you. `entry_id` is a stable name of your choosing, e.g. "kite-identity"; overwriting keeps the old version.
    An entry_id another agent already uses is refused (pick another)."""
    col = _service(call).collection("memories", create=True)
    tag_list = parse_tags(tags)
    existing = col.memories.get(entry_id)
    if existing is not None:
        check_bootstrap_owner(existing, call.agent, _free_id(col, f"{call.agent}-{entry_type}", call.agent))
        # No grants here: bootstrap_update never changes another agent's entry (also re-checked under the lock).
        memory = col.update(entry_id, editor=call.agent, editors={}, content=content, tags=tag_list,
                            type=parse_label(entry_type, "entry_type"), project=parse_label(project, "project"))
        return {"status": "updated", **public(memory)}
    _check_not_reserved(entry_id, "entry_id")
    item = NewMemory(content=content, project=parse_label(project, "project"), type=parse_label(entry_type, "entry_type"),
                     tags=tag_list, memory_id=entry_id)
    return col.store([item], author=call.agent, dedup=False)[0]


ALL_TOOLS = [memory_store, memory_bulk_store, memory_search, memory_get, memory_update, memory_delete,
             memory_validate, memory_unlink, memory_consolidate, memory_stats, memory_list_collections, chorus_init,
             bootstrap_update]
