"""memory_store and memory_bulk_store: one memory, or many as pieces of one conversation or document."""

from __future__ import annotations

import itertools
import json

from persmem_core.sdk import CallContext, UserError

from ..store.contexts import CONTEXT_CHARS_PER_SIDE, conversation_contexts
from ..store.query import parse_created, parse_label, parse_tags
from ..store.new_memory import NewMemory
from .arguments import caller_memory, check_id_allowed, check_not_reserved, parse_date, parse_ids


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
    memory = caller_memory(call)
    if memory_id:
        check_id_allowed(memory, collection, "memory_id")
        check_not_reserved(memory_id, "memory_id")
    memory_type = parse_label(memory_type, "memory_type")
    item = NewMemory(content=content, project=parse_label(project, "project"), type=memory_type,
                     tags=parse_tags(tags), memory_id=memory_id,
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
            f"{'that memory' if len(links) == 1 else 'those memories'} now rank below it, marked superseded_by "
            f"{result['id']} (nothing is deleted). "
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
    memory, items = caller_memory(call), []
    for i, chunk in enumerate(chunks):
        if not isinstance(chunk, dict) or not isinstance(chunk.get("content"), str):
            raise UserError(f"chunks[{i}] must be an object with a string 'content'.")
        for key in ("project", "type", "memory_type", "id", "created"):
            if chunk.get(key) is not None and not isinstance(chunk[key], str):
                raise UserError(f"chunks[{i}].{key} must be a string, got {type(chunk[key]).__name__} "
                                f"{json.dumps(chunk[key])[:40]}; leave it out to use the default.")
        if chunk.get("id"):
            check_id_allowed(memory, collection, f"chunks[{i}].id")
            check_not_reserved(chunk["id"], f"chunks[{i}].id")
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
    results = memory.store(collection, items, dedup=dedup)
    return {"stored": sum(r["status"] == "stored" for r in results), "results": results}
