"""One memory by id: memory_get, memory_update, memory_delete, memory_validate and memory_unlink."""

from __future__ import annotations

from persmem_core.sdk import CallContext, UserError

from ..store.query import parse_label, parse_tags, shown
from ..store.records import ID_RE, iso, public, public_version
from .arguments import caller_memory, parse_date

CHAIN_SHOWN = 21  # steps of a supersession chain memory_get shows: the memory and the 20 nearest around it


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
    memory = caller_memory(call).update(
        collection, memory_id, content=content,
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
    memory = caller_memory(call).delete(collection, memory_id)
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
    agent_memory = caller_memory(call)
    memory = agent_memory.validate(collection, memory_id, helpful=helpful, note=note)
    state = agent_memory.lifecycle_of(collection, memory.id)
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
    # supersedes_id is not looked up: whether it exists is none of the caller's business when it cannot see it
    # (another agent's session turn, whose id can be computed). The store answers from memory_id's own links
    # alone, so a hidden id and a missing one get the same reply.
    newer = caller_memory(call).unlink(collection, memory_id, supersedes_id or None)
    last = newer.link_history[-1].at if newer.link_history else None
    undone = [c.target for c in newer.link_history if c.action == "unlinked" and c.at == last]
    return {"status": "unlinked", "id": newer.id, "unlinked": undone, "supersedes": list(newer.supersedes)}
