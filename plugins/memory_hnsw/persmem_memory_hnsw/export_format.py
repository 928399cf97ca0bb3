"""The JSON Lines format of `persmem memory export` and `persmem memory import`: a memory as one record (its
history, links, feedback and validity dates, times ISO 8601 with microseconds), and a record read back as the
memory to store with the lifecycle fields restored after it.
"""

from __future__ import annotations

from .store.contexts import MAX_CONTEXT_CHARS, MAX_QUESTION_CHARS
from .store.query import check_visible_label, parse_label
from .store.records import Feedback, LinkChange, iso_exact, parse_iso, public, public_version
from .store.new_memory import NewMemory


def record_of(memory) -> dict:
    """A memory as an export writes it."""
    record = public(memory)
    # Microseconds: an import restores the time as it was.
    record["created"], record["updated"] = iso_exact(memory.created), iso_exact(memory.updated)
    record["history"] = [public_version(v) for v in memory.history]
    if memory.context:
        record["context"] = memory.context
    if memory.reply_to:
        record["reply_to"] = memory.reply_to
    record.update(_lifecycle_record(memory))
    return record


def memory_of(rec: dict) -> tuple[NewMemory, dict]:
    """An exported record as the memory to store, and its lifecycle fields set after the store (supersedes, link
    history, feedback). KeyError, TypeError, ValueError or UserError when it is not a memory record."""
    context, reply_to = rec.get("context") or "", rec.get("reply_to") or ""
    for key, value, limit in (("context", context, MAX_CONTEXT_CHARS),
                              ("reply_to", reply_to, MAX_QUESTION_CHARS)):
        if not isinstance(value, str):
            raise TypeError(f"{key} must be a string, not {type(value).__name__}")
        if len(value) > limit:
            raise ValueError(f"{key} is {len(value)} characters, at most {limit}")
    author = rec.get("author")
    if author is not None:
        if not isinstance(author, str) or not author.strip():
            raise TypeError("author must be a name")
        check_visible_label(author, "author")
    lifecycle = _lifecycle_from(rec)
    item = NewMemory(content=rec["content"], project=parse_label(rec.get("project", "general"), "project"),
                     type=parse_label(rec.get("type", "session_note"), "type"),
                     tags=_tags(rec.get("tags", [])),
                     memory_id=rec.get("id"), author=author, created=_created(rec),
                     context=context, reply_to=reply_to,
                     consolidates=lifecycle.pop("consolidates"),
                     valid_until=lifecycle.pop("valid_until"),
                     review_after=lifecycle.pop("review_after"))
    return item, lifecycle


def _tags(value) -> list[str]:
    """An exported memory's tags: a list of strings, each one line of visible text."""
    if not isinstance(value, list) or not all(isinstance(tag, str) for tag in value):
        raise TypeError("tags must be a list of strings")
    for tag in value:
        check_visible_label(tag, "tag")
    return list(value)


def _created(record: dict) -> float | None:
    """When an exported memory was stored: its ISO `created` (or `created_ts`, the seconds older exports wrote)."""
    if isinstance(record.get("created"), str):
        return parse_iso(record["created"])
    if isinstance(record.get("created_ts"), (int, float)):
        return float(record["created_ts"])
    return None


def _lifecycle_record(memory) -> dict:
    """A memory's lifecycle fields as an export writes them (only those set; times ISO with microseconds)."""
    record = {}
    if memory.supersedes:
        record["supersedes"] = list(memory.supersedes)
    if memory.link_history:
        record["link_history"] = [{"action": c.action, "target": c.target, "by": c.by, "at": iso_exact(c.at),
                                   "how": c.how, "detail": c.detail} for c in memory.link_history]
    if memory.consolidates:
        record["consolidates"] = list(memory.consolidates)
    if memory.feedback:
        record["feedback"] = [{"by": f.by, "at": iso_exact(f.at), "helpful": f.helpful, "note": f.note}
                              for f in memory.feedback]
    for key in ("valid_until", "review_after"):
        if getattr(memory, key):
            record[key] = iso_exact(getattr(memory, key))
    return record


def _lifecycle_from(record: dict) -> dict:
    """The lifecycle fields of an exported record, typed (TypeError / ValueError when malformed)."""

    def ids(key: str) -> list[str]:
        value = record.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise TypeError(f"{key} must be a list of memory ids")
        return value

    def when(key: str) -> float:
        value = record.get(key)
        return parse_iso(value) if isinstance(value, str) and value else 0.0

    history = [LinkChange(action=str(c["action"]), target=str(c["target"]), by=str(c["by"]), at=parse_iso(c["at"]),
                          how=str(c.get("how", "")), detail=str(c.get("detail", "")))
               for c in record.get("link_history") or []]
    feedback = [Feedback(by=str(f["by"]), at=parse_iso(f["at"]), helpful=bool(f["helpful"]),
                         note=str(f.get("note", ""))) for f in record.get("feedback") or []]
    return {"supersedes": ids("supersedes"), "link_history": history, "feedback": feedback,
            "consolidates": ids("consolidates"), "valid_until": when("valid_until"),
            "review_after": when("review_after")}
