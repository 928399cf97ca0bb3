"""The Memory record and the entries of the record log (msgspec, MessagePack on disk)."""

from __future__ import annotations

import hashlib
import re
import secrets
import time
from datetime import datetime, timezone

import msgspec

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_:.\-]{0,127}\Z")  # \Z, not $: $ also matches before a final "\n"
MAX_FEEDBACK = 100  # feedback entries a memory keeps (each agent's latest verdict is kept first: see trim_feedback)


class Version(msgspec.Struct, kw_only=True, array_like=True):
    """A previous version of a memory, kept when it is updated. Stored as an array: a field added later goes
    last and has a default, so entries written before it still decode."""

    version: int
    content: str
    tags: list[str]
    type: str
    project: str
    author: str  # the memory's author (its owner), not necessarily who made this version
    updated: float
    editor: str = ""  # who made this version; "" in logs written before editors were recorded


def expired(valid_until: float, now: float) -> bool:
    """Past its valid_until (0: never expires)."""
    return bool(valid_until) and valid_until <= now


def review_due(review_after: float, now: float) -> bool:
    """Past its review_after (0: never due)."""
    return bool(review_after) and review_after <= now


def version_of(memory: Memory) -> Version:
    """A memory's current state as the previous version a new one keeps in its history."""
    return Version(version=memory.version, content=memory.content, tags=memory.tags, type=memory.type,
                   project=memory.project, author=memory.author, updated=memory.updated, editor=memory.editor)


class Feedback(msgspec.Struct, kw_only=True, array_like=True):
    """One agent's verdict on a memory (memory_validate). Only each agent's latest verdict counts toward the
    memory's confidence (lifecycle.confidence), so repeating one does not weigh more."""

    by: str
    at: float
    helpful: bool
    note: str = ""


class LinkChange(msgspec.Struct, kw_only=True, array_like=True):
    """One change to a memory's `supersedes` links, kept so a link (and its undoing) can be explained later."""

    action: str  # "linked" or "unlinked"
    target: str  # the id of the older memory
    by: str  # the agent who stored the successor (a detected link) or who linked / unlinked it
    at: float
    how: str = ""  # "explicit" (memory_store supersedes=), "detected" (supersession.find_superseded), "unlink"
    detail: str = ""  # why, in words: "similarity 0.83; shared terms: staging, database"


class Memory(msgspec.Struct, kw_only=True):
    id: str
    content: str
    project: str
    type: str
    tags: list[str]
    author: str
    collection: str
    created: float
    updated: float
    version: int = 1
    editor: str = ""  # who made this version (the author, or an agent `[memory] editors` grants); "" in older logs
    content_hash: str = ""
    context: str = ""  # neighbouring chunks' text (memory_bulk_store), indexed for keyword search only
    reply_to: str = ""  # the question just before it in its conversation (contexts.questions_before), likewise
    labels: list[int] = []  # vector-index labels of this memory's chunks
    history: list[Version] = []
    # The lifecycle (search/weighing.py; docs/memory.md "Memory that stays true"). Every field has a default, so
    # logs written before it decode unchanged. A link lives on one side only (the newer memory, or the
    # consolidated one): one log entry makes or undoes it, and the other side's view is derived on replay.
    supersedes: list[str] = []  # ids of older memories (same collection) this one replaces
    link_history: list[LinkChange] = []  # how `supersedes` came to be, and links undone
    consolidates: list[str] = []  # for a consolidated memory: the ids of its members
    feedback: list[Feedback] = []  # memory_validate verdicts, oldest first (the latest MAX_FEEDBACK kept)
    valid_until: float = 0.0  # a timestamp after which the memory is expired (hidden from search); 0: never
    review_after: float = 0.0  # a timestamp after which it is due for review (listed, still searched); 0: never


class Head(msgspec.Struct, kw_only=True, gc=False):
    """What a collection keeps in memory of a live memory: everything but its text and history, which stay in
    the log (read back by span when a memory is returned). With the collection's dicts, ~0.7 KB per memory
    instead of ~1.6 KB (measured at 100k memories)."""

    id: str
    project: str
    type: str
    author: str
    tags: tuple[str, ...]
    created: float
    updated: float
    version: int
    chars: int
    first_label: int
    n_labels: int
    dedup_key: int  # (project, author, content hash) folded to 64 bits; a match is confirmed against the log
    supersedes: tuple[str, ...] = ()
    consolidates: tuple[str, ...] = ()
    confidence: float = 0.5  # from its feedback (lifecycle.confidence); 0.5 when none
    valid_until: float = 0.0
    review_after: float = 0.0

    @property
    def labels(self) -> list[int]:
        return list(range(self.first_label, self.first_label + self.n_labels))


def head_of(memory: Memory, strings: dict[str, str]) -> Head:
    """The in-memory head of `memory`; repeated strings (projects, types, authors, tags) are shared via `strings`."""
    def one(value: str) -> str:
        return strings.setdefault(value, value)

    labels = memory.labels
    if labels and labels != list(range(labels[0], labels[0] + len(labels))):
        raise ValueError(f"memory {memory.id}: its vector labels are not consecutive")
    return Head(id=memory.id, project=one(memory.project), type=one(memory.type), author=one(memory.author),
                tags=tuple(one(t) for t in memory.tags), created=memory.created, updated=memory.updated,
                version=memory.version, chars=len(memory.content), first_label=labels[0] if labels else 0,
                n_labels=len(labels), dedup_key=dedup_key(memory.project, memory.author, memory.content_hash),
                supersedes=tuple(memory.supersedes), consolidates=tuple(memory.consolidates),
                confidence=confidence(memory.feedback, memory.author) if memory.feedback else 0.5,
                valid_until=memory.valid_until, review_after=memory.review_after)


def confidence(feedback: list[Feedback], author: str = "") -> float:
    """(1 + helpful) / (2 + helpful + unhelpful) over each agent's latest verdict (see `votes`): one agent is one
    vote, so repeating a verdict weighs no more, and one agent alone moves a memory only to 2/3 or 1/3."""
    up, down = votes(feedback, author)
    return (1 + up) / (2 + up + down)


def votes(feedback: list[Feedback], author: str = "") -> tuple[int, int]:
    """(helpful, unhelpful) counting each agent's latest verdict only (`feedback` is oldest first). The verdict
    of the memory's `author` counts only against the others' balance, up to evening it: an author may answer a
    verdict on its memory, but never lift (or sink) its own memory past neutral by itself."""
    latest = {entry.by: entry.helpful for entry in feedback}
    own = latest.pop(author, None) if author else None
    up = sum(1 for helpful in latest.values() if helpful)
    down = len(latest) - up
    if own is True and up < down:
        up += 1
    elif own is False and down < up:
        down += 1
    return up, down


def trim_feedback(feedback: list[Feedback]) -> list[Feedback]:
    """The latest MAX_FEEDBACK entries, but an agent's older verdicts go before anyone's latest: one agent
    voting again and again must not push the other agents' votes out."""
    if len(feedback) <= MAX_FEEDBACK:
        return feedback
    latest_at = {entry.by: i for i, entry in enumerate(feedback)}
    keep_latest = set(latest_at.values())
    repeats = len(feedback) - len(keep_latest)
    drop = len(feedback) - MAX_FEEDBACK
    dropped_repeats = 0
    kept = []
    for i, entry in enumerate(feedback):  # oldest repeats go first
        if i not in keep_latest and dropped_repeats < min(drop, repeats):
            dropped_repeats += 1
            continue
        kept.append(entry)
    return kept[len(kept) - MAX_FEEDBACK:] if len(kept) > MAX_FEEDBACK else kept


def summarize(heads) -> dict:
    """Counts over memories' heads, as memory_stats and `persmem memory stats` show them (oldest and newest as
    timestamps: each caller formats them)."""
    projects, types, tags, authors = {}, {}, {}, {}
    sizes, oldest, newest, chunks = [], None, None, 0
    for m in heads:
        projects[m.project] = projects.get(m.project, 0) + 1
        types[m.type] = types.get(m.type, 0) + 1
        authors[m.author] = authors.get(m.author, 0) + 1
        for tag in m.tags:
            tags[tag] = tags.get(tag, 0) + 1
        sizes.append(m.chars)
        oldest = m.created if oldest is None else min(oldest, m.created)
        newest = m.created if newest is None else max(newest, m.created)
        chunks += m.n_labels
    return {
        "count": len(sizes),
        "projects": projects,
        "types": types,
        "authors": authors,
        "tags": dict(sorted(tags.items(), key=lambda kv: -kv[1])[:50]),
        "unique_tags": len(tags),
        "average_chars": round(sum(sizes) / len(sizes), 1) if sizes else 0,
        "oldest": oldest,
        "newest": newest,
        "chunks": chunks,
    }


def dedup_key(project: str, author: str, digest: str) -> int:
    """Duplicates are looked for among one author's memories only: answering "duplicate" with another agent's
    memory would hand the caller a memory it cannot change and its author can rewrite."""
    return int.from_bytes(hashlib.blake2b(f"{project}\0{author}\0{digest}".encode(), digest_size=8).digest(),
                          "little")


class Put(msgspec.Struct, tag="put", kw_only=True, omit_defaults=True):
    """The memory's current state, with its chunk vectors (float32, one row per label). A store is logged before
    it is embedded: `vectors` is then empty (its labels are reserved) and the background embedder logs it again
    with them (embedding/background.py); `detect` asks it to look for an older memory this one restates when it does."""

    memory: Memory
    vectors: bytes
    detect: bool = False
    seq: int = 0  # on a cluster: the memory stream's sequence it was published at (cluster/replication.py); 0 alone


class Delete(msgspec.Struct, tag="del", kw_only=True, omit_defaults=True):
    id: str
    at: float
    by: str
    seq: int = 0  # as Put.seq


Entry = Put | Delete


def content_hash(text: str) -> str:
    normalized = " ".join(text.split()).casefold()
    return hashlib.sha256(normalized.encode("utf-8")).hexdigest()


def new_id() -> str:
    """Time-ordered, unique: milliseconds in hex + 40 random bits."""
    return f"mem_{int(time.time() * 1000):012x}{secrets.token_hex(5)}"


def public(memory: Memory) -> dict:
    """The memory as tools return it (no internal fields)."""
    return {
        "id": memory.id,
        "content": memory.content,
        "project": memory.project,
        "type": memory.type,
        "tags": memory.tags,
        "author": memory.author,
        "collection": memory.collection,
        "created": iso(memory.created),
        "updated": iso(memory.updated),
        "version": memory.version,
        "editor": made_by(memory.version, memory.editor, memory.author),
    }


def public_version(version: Version) -> dict:
    """A previous version as memory_get(include_history=true) returns it."""
    return {"version": version.version, "content": version.content, "tags": version.tags, "type": version.type,
            "project": version.project, "author": version.author,
            "editor": made_by(version.version, version.editor, version.author), "updated": iso(version.updated)}


def made_by(version: int, editor: str, author: str) -> str | None:
    """Who made a version. Logs written before editors were recorded know it only for version 1 (its author
    stored it); for their later versions it is unknown (None)."""
    return editor or (author if version == 1 else None)


def iso(ts: float) -> str:
    """A timestamp as ISO 8601 UTC with milliseconds, as every tool and CLI command shows times."""
    ms = round(ts * 1000)  # rounded, so a time read back from this text shows the same text again
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + f".{ms % 1000:03d}Z"


def iso_exact(ts: float) -> str:
    """A timestamp as ISO 8601 UTC with microseconds (exports: an import restores the time as it was)."""
    us = round(ts * 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(us // 1_000_000)) + f".{us % 1_000_000:06d}Z"


def parse_iso(text: str) -> float:
    """The timestamp of an ISO 8601 time (UTC unless it says otherwise); ValueError if it is not one."""
    parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp()
