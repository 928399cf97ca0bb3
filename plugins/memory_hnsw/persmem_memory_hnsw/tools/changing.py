"""One memory by id: memory_get, memory_update, memory_delete, memory_validate and memory_unlink."""

from __future__ import annotations

from persmem_core.sdk import CallContext, UserError

from ..store.query import parse_label, parse_tags, shown
from ..store.records import ID_RE, iso, public, public_version
from .arguments import Tags, caller_memory, parse_date, parse_ids

CHAIN_SHOWN = 21  # steps of a supersession chain memory_get shows: the memory and the 20 nearest around it


def memory_get(memory_id: str, collection: str = "memories", include_history: bool = False,
               call: CallContext = None) -> dict:
    """Read a memory whole, with its links and state (superseded_by, chain, confidence, expired...).
    include_history: also past versions, link and feedback history."""
    agent_memory = caller_memory(call)
    # Just stored: a link its embedding may make is part of the answer.
    memory = agent_memory.get(collection, memory_id, wait_embedded=True)
    result = public(memory)
    result.update(_lifecycle_fields(agent_memory.lifecycle_of(collection, memory_id), memory_id))
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


def memory_update(memory_id: str, content: str = "", tags: Tags | None = None, memory_type: str = "",
                  project: str = "", collection: str = "memories", valid_until: str = "", review_after: str = "",
                  supersedes: str | list[str] = "", call: CallContext = None) -> dict:
    """Change a memory in place (old version kept). Pass only what changes; tags="" clears them; dates: ISO or
    "none" to clear. supersedes: ids of older memories this one replaces (as memory_store's may_replace
    suggests); they then rank below it, marked superseded_by."""
    until, review = parse_date(valid_until, "valid_until", clearable=True), parse_date(
        review_after, "review_after", clearable=True)
    targets = parse_ids(supersedes, "supersedes")
    changes = (content or tags is not None or memory_type or project or until is not None
               or review is not None)
    if not changes and not targets:
        raise UserError("nothing to update: pass content, tags, memory_type, project, valid_until, review_after "
                        "or supersedes.")
    memory = caller_memory(call)
    if changes:
        updated = memory.update(
            collection, memory_id, content=content or None,
            tags=None if tags is None else parse_tags(tags),
            type=parse_label(memory_type, "memory_type") if memory_type else None,
            project=parse_label(project, "project") if project else None,
            valid_until=until, review_after=review,
        )
    if targets:
        updated = memory.link(collection, memory_id, targets)
    reply = {"status": "updated", **public(updated)}
    for key in ("valid_until", "review_after"):
        if getattr(updated, key):
            reply[key] = iso(getattr(updated, key))
    return reply


def memory_delete(memory_id: str, collection: str = "memories", call: CallContext = None) -> dict:
    """Delete a memory (logged). Your own, or others' if the operator granted it."""
    memory = caller_memory(call).delete(collection, memory_id)
    return {"status": "deleted", "id": memory.id}


def memory_validate(memory_id: str, helpful: bool, note: str = "", collection: str = "memories",
                    call: CallContext = None) -> dict:
    """After using a memory, say if it helped (true) or was wrong or outdated (false): nudges its confidence
    and rank. note: why (max 500 chars)."""
    if not isinstance(helpful, bool):
        raise UserError(f"helpful must be true or false, got {shown(helpful)}.")
    if not isinstance(note, str):
        raise UserError("note must be a string (why the memory helped or not), or empty.")
    agent_memory = caller_memory(call)
    memory = agent_memory.validate(collection, memory_id, helpful=helpful, note=note)
    state = agent_memory.lifecycle_of(collection, memory.id)
    return {"status": "recorded", "id": memory.id, "helpful": helpful, "confidence": round(state["confidence"], 3),
            "feedback": state["feedback"]}


def memory_unlink(memory_id: str, supersedes_id: str = "", collection: str = "memories",
                  call: CallContext = None) -> dict:
    """Undo a wrong supersession link (e.g. one memory_store detected): the older memory ranks as before.
    memory_id: either side; from the newer one, supersedes_id picks the link (empty: all). Nothing is
    deleted."""
    supersedes_id = (supersedes_id or "").strip()
    for value, what in ((memory_id, "memory_id"), (supersedes_id, "supersedes_id")):
        if value and not ID_RE.match(value):
            raise UserError(f"{what}: {shown(value)} is not a memory id; memory_get(memory_id) shows its links.")
    # supersedes_id is not looked up: whether it exists is none of the caller's business when it cannot see it
    # (another agent's session turn, whose id can be computed). The store answers from memory_id's own links
    # alone, so a hidden id and a missing one get the same reply.
    newer = caller_memory(call).unlink(collection, memory_id, supersedes_id or None)
    last = newer.link_history[-1].at if newer.link_history else None
    undone = [c.target for c in newer.link_history if c.action == "unlinked" and c.at == last]
    return {"status": "unlinked", "id": newer.id, "unlinked": undone, "supersedes": list(newer.supersedes)}
