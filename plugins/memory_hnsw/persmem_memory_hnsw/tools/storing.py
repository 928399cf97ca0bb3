"""memory_store and memory_bulk_store: one memory, or many as pieces of one conversation or document."""

from __future__ import annotations

import itertools
import json

from persmem_core.sdk import CallContext, UserError

from ..access import AgentMemory
from ..store.contexts import CONTEXT_CHARS_PER_SIDE, conversation_contexts
from ..store.new_memory import NewMemory
from ..store.query import parse_created, parse_label, parse_tags
from ..store.records import iso
from .arguments import Tags, caller_memory, check_id_allowed, check_not_reserved, parse_date, parse_ids

MAX_BULK_CHUNKS = 1000  # chunks one memory_bulk_store call takes
BULK_REPLACED_CHUNKS = 20  # notes (context_chars=0) in a call up to this many: each reply names what it may replace


def memory_store(
    content: str,
    project: str = "general",
    tags: Tags = "",
    memory_type: str = "session_note",
    collection: str = "memories",
    memory_id: str = "",
    dedup: bool = True,
    supersedes: str | list[str] = "",
    valid_until: str = "",
    review_after: str = "",
    call: CallContext = None,
) -> dict:
    """Store a memory (fact, decision, handoff, bug...) for later sessions. memory_type: session_note, decision,
    handoff, bug, pattern, preference... tags: "a,b" or a list. dedup: returns your identical or near-identical
    memory instead. supersedes: ids this replaces (ranked lower, marked superseded_by; memory_unlink undoes a
    link); the reply's may_replace names older memories it may restate. valid_until: ISO date, then hidden;
    review_after: then marked review_due."""
    memory = caller_memory(call)
    if memory_id:
        check_id_allowed(memory, collection, "memory_id")
        check_not_reserved(memory_id, "memory_id")
    memory_type = parse_label(memory_type, "memory_type")
    item = NewMemory(content=content, project=parse_label(project, "project"), type=memory_type,
                     tags=parse_tags(tags), memory_id=memory_id or None,
                     supersedes=parse_ids(supersedes, "supersedes"),
                     valid_until=parse_date(valid_until, "valid_until") or 0.0,
                     review_after=parse_date(review_after, "review_after") or 0.0,
                     # One curated memory may restate an older one (writing/storing.may_detect says where it applies).
                     detect_supersession=True, show_replaced=True)
    result = memory.store(collection, [item], dedup=dedup)[0]  # a new name is made (within [memory] max_collections)
    _show_replaced(memory, collection, result)
    return _explain_links(result, item.supersedes)


REPLACED_TEXT_CHARS = 100  # of each memory a store reply says it may replace


def _show_replaced(memory: AgentMemory, collection: str, result: dict) -> None:
    """A store result's `may_replace` (ids) shown as the assistant reads it: each one's id, date and first line,
    and one sentence on how to link them (lifecycle/restatement.py finds them)."""
    found = result.get("may_replace")
    if not found:
        return
    shown = []
    for candidate in found:
        try:
            older = memory.get(collection, candidate["id"])
        except UserError:  # deleted meanwhile
            continue
        line = older.content.strip().split("\n", 1)[0]
        shown.append({"id": older.id, "date": iso(older.updated)[:10],
                      "text": line if len(line) <= REPLACED_TEXT_CHARS else line[:REPLACED_TEXT_CHARS - 1] + "…"})
    if not shown:
        result.pop("may_replace")
        return
    result["may_replace"] = shown
    result["replace_hint"] = (
        f"This may restate {'an older memory' if len(shown) == 1 else 'older memories'} (may_replace). If it "
        f"replaces one, link them: memory_update(memory_id={result['id']!r}, supersedes=<its id>); next time pass "
        "supersedes= to memory_store. If not, ignore this.")


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
            f"{'that memory now ranks' if len(links) == 1 else 'those memories now rank'} below it, marked "
            f"superseded_by {result['id']} (nothing is deleted). "
            + (f"The link to {', '.join(detected)} was detected (a restatement of the same subject); if it is "
               f"wrong, memory_unlink(memory_id={result['id']!r}) undoes it." if detected else
               f"memory_unlink(memory_id={result['id']!r}) undoes it."))
    return result


def memory_bulk_store(
    chunks: str | list,
    project: str = "general",
    collection: str = "memories",
    dedup: bool = True,
    context_chars: int = 300,
    call: CallContext = None,
) -> dict:
    """Store up to 1000 chunks in one write: a JSON array (or list) of {content, tags?, type?, project?, id?,
    created? (ISO time said)}. One call is one conversation or document, in order (one call per chat
    session): each chunk is keyword-indexed with context_chars of its neighbours and a reply with its question;
    context_chars=0 (unrelated notes) turns both off. dedup: a chunk repeating an earlier one of this call word
    for word gets the first's id."""
    chunks = _chunk_list(chunks)
    if not 0 <= context_chars <= CONTEXT_CHARS_PER_SIDE:
        raise UserError(f"context_chars must be 0-{CONTEXT_CHARS_PER_SIDE}, got {context_chars}.")
    memory = caller_memory(call)
    items = [_chunk_item(memory, collection, project, i, chunk) for i, chunk in enumerate(chunks)]
    if not context_chars and len(items) <= BULK_REPLACED_CHUNKS:  # unrelated notes: each may restate an older one
        for item in items:
            item.show_replaced = True
    if context_chars:
        for _, run in itertools.groupby(items, key=lambda item: item.project):  # another project's chunk is no context
            run = list(run)
            for item, (context, question) in zip(run, conversation_contexts([x.content for x in run], context_chars),
                                                 strict=True):
                item.context, item.reply_to = context, question
    results = _store_each_text_once(memory, collection, items) if dedup else memory.store(collection, items,
                                                                                         dedup=False)
    for result in results:
        _show_replaced(memory, collection, result)
        result.pop("replace_hint", None)
    reply = {"stored": sum(r["status"] == "stored" for r in results), "results": results}
    if any(r.get("may_replace") for r in results):
        reply["replace_hint"] = ("Some of these may restate older memories (may_replace). If one replaces "
                                 "another, link them: memory_update(memory_id=<new id>, supersedes=<old id>).")
    return reply


def _chunk_list(chunks: str | list) -> list:
    """memory_bulk_store's chunks as a list: parsed when JSON text, refused when empty or over MAX_BULK_CHUNKS."""
    if isinstance(chunks, str):
        try:
            chunks = json.loads(chunks)
        except json.JSONDecodeError as exc:
            raise UserError(f"chunks is not valid JSON ({exc}); pass a JSON array of objects with a 'content' "
                            "field.") from None
        except RecursionError:
            raise UserError("chunks is nested too deeply to read; pass a flat JSON array of objects like "
                            "{\"content\": \"...\"}.") from None
    if not isinstance(chunks, list) or not chunks:
        raise UserError("chunks must be a non-empty JSON array of objects like {\"content\": \"...\"}.")
    if len(chunks) > MAX_BULK_CHUNKS:
        raise UserError(f"{len(chunks)} chunks in one call; send at most {MAX_BULK_CHUNKS} per call (a longer "
                        "conversation in several calls, in order).")
    return chunks


def _chunk_item(memory: AgentMemory, collection: str, project: str, i: int, chunk) -> NewMemory:
    """chunks[i] checked and made a NewMemory (the call's project unless it names its own)."""
    if not isinstance(chunk, dict) or not isinstance(chunk.get("content"), str):
        raise UserError(f"chunks[{i}] must be an object with a string 'content'.")
    for key in ("project", "type", "memory_type", "id", "created"):
        if chunk.get(key) is not None and not isinstance(chunk[key], str):
            raise UserError(f"chunks[{i}].{key} must be a string, got {type(chunk[key]).__name__} "
                            f"{json.dumps(chunk[key])[:40]}; leave it out to use the default.")
    if chunk.get("id"):
        check_id_allowed(memory, collection, f"chunks[{i}].id")
        check_not_reserved(chunk["id"], f"chunks[{i}].id")
    return NewMemory(
        content=chunk["content"],
        project=parse_label(chunk.get("project") or project, f"chunks[{i}].project"),
        type=parse_label(chunk.get("type") or chunk.get("memory_type") or "session_note", f"chunks[{i}].type"),
        tags=parse_tags(chunk.get("tags"), f"chunks[{i}].tags"),
        memory_id=chunk.get("id") or None,
        created=parse_created(chunk.get("created"), f"chunks[{i}].created"),
    )


def _store_each_text_once(memory: AgentMemory, collection: str, items: list[NewMemory]) -> list[dict]:
    """memory_bulk_store's dedup: a chunk repeating an earlier chunk of the same call word for word (same
    project, no id of its own) is not stored again; its result is {"status": "duplicate", "id": <the first's>,
    "match": "exact"}. Only within the call: a conversation's lines are not compared with what was stored before
    (the same "ok" in another conversation is another event), nor by meaning (near-identical turns differ)."""
    first: dict[tuple[str, str], int] = {}  # (project, text) -> index in `unique`
    unique, where = [], []  # where[i]: (index in unique, repeats an earlier chunk)
    for item in items:
        key = (item.project, item.content)
        if item.memory_id is None and key in first:
            where.append((first[key], True))
            continue
        if item.memory_id is None:
            first[key] = len(unique)
        where.append((len(unique), False))
        unique.append(item)
    stored = memory.store(collection, unique, dedup=False)
    return [{"status": "duplicate", "id": stored[at]["id"], "match": "exact"} if repeat else stored[at]
            for at, repeat in where]
