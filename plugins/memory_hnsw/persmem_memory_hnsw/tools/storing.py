"""memory_store and memory_bulk_store: one memory, or many as pieces of one conversation or document."""

from __future__ import annotations

import itertools
import json

from persmem_core.sdk import CallContext, UserError

from ..access import AgentMemory
from ..store.contexts import CONTEXT_CHARS_PER_SIDE, conversation_contexts
from ..store.new_memory import NewMemory
from ..store.query import parse_created, parse_label, parse_tags
from .arguments import Tags, caller_memory, check_id_allowed, check_not_reserved, parse_date, parse_ids

MAX_BULK_CHUNKS = 1000  # chunks one memory_bulk_store call takes


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
    link). valid_until: ISO date, then hidden; review_after: then marked review_due."""
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
                     detect_supersession=True)
    result = memory.store(collection, [item], dedup=dedup)[0]  # a new name is made (within [memory] max_collections)
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
    if context_chars:
        for _, run in itertools.groupby(items, key=lambda item: item.project):  # another project's chunk is no context
            run = list(run)
            for item, (context, question) in zip(run, conversation_contexts([x.content for x in run], context_chars),
                                                 strict=True):
                item.context, item.reply_to = context, question
    results = _store_each_text_once(memory, collection, items) if dedup else memory.store(collection, items,
                                                                                         dedup=False)
    return {"stored": sum(r["status"] == "stored" for r in results), "results": results}


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
