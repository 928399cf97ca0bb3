"""The session tools: list, read and search the caller's own archived Claude Code and Codex sessions.

Replies are sized for an AI: long turns are cut (session_read says how to see more), and the whole reply stays
within REPLY_CHARS. Another agent's sessions are never listed, read or searched: an id that is not the
caller's answers as if it did not exist.
"""

from __future__ import annotations

import json

from persmem_core.sdk import CallContext, UserError

from .service import service
from .transcripts import cut
from .web import SESSION_ID_RE

REPLY_CHARS = 16_000  # a whole reply, as the caller reads it
READ_TURN_CHARS = 2_000  # one turn in session_read
SEARCH_TURN_CHARS = 600  # one hit in session_search
NOTHING_RELEVANT = ("No turn of your sessions is about this: none shares a word with the query or comes near it in "
                    "meaning. Try other words, or drop project/session_id; session_list shows what is archived.")
MAX_LIST = 100
MAX_READ = 200


def _size(value) -> int:
    return len(json.dumps(value, indent=2, ensure_ascii=False))


def _check_session_id(session_id: str) -> str:
    session_id = (session_id or "").strip()
    if not SESSION_ID_RE.match(session_id):
        raise UserError(f"session_id {session_id[:70]!r} is not a session id (1-128 letters, digits, '.', '_', ':', "
                        "'-'); session_list shows your sessions' ids.")
    return session_id


def session_list(project: str = "", limit: int = 20, call: CallContext = None) -> dict:
    """Your archived Claude Code / Codex sessions, latest first. project: "" for all. limit: 1-100."""
    if not 1 <= limit <= MAX_LIST:
        raise UserError(f"limit must be from 1 to {MAX_LIST}, got {limit}.")
    metas = service(call.host).sessions_of(call.agent, (project or "").strip())
    rows = [{"session_id": m.session_id, "client": m.client, "project": m.project, "title": m.title,
             "turns": m.turns, "first_time": m.first_time, "last_time": m.last_time, "cwd": m.cwd}
            for m in metas[:limit]]
    reply = {"sessions": rows, "total": len(metas)}
    while rows and _size(reply) > REPLY_CHARS:
        rows.pop()
    if len(rows) < len(metas):
        reply["note"] = f"{len(rows)} of {len(metas)} shown; filter by project or raise limit (max {MAX_LIST})."
    return reply


def session_read(session_id: str, offset: int = 0, limit: int = 50, call: CallContext = None) -> dict:
    """Read one of your sessions turn by turn (long turns cut, secrets redacted). limit: 1-200 turns;
    next_offset continues."""
    session_id = _check_session_id(session_id)
    if offset < 0:
        raise UserError(f"offset must be 0 or more, got {offset}.")
    if not 1 <= limit <= MAX_READ:
        raise UserError(f"limit must be from 1 to {MAX_READ}, got {limit}.")
    meta, turns = service(call.host).turns(call.agent, session_id, offset, limit)
    shown = [{"index": t["index"], "role": t["role"], "time": t["time"], "text": cut(t["text"], READ_TURN_CHARS)}
             for t in turns]
    reply = {"session_id": meta.session_id, "client": meta.client, "project": meta.project, "turns": shown,
             "total_turns": meta.turns, "next_offset": None}
    while len(shown) > 1 and _size(reply) > REPLY_CHARS:
        shown.pop()
    last = shown[-1]["index"] if shown else offset - 1
    if last + 1 < meta.turns:
        reply["next_offset"] = last + 1
    if offset >= meta.turns and meta.turns:
        reply["note"] = f"this session has {meta.turns} turns; offset {offset} is past the end."
    return reply


def session_search(query: str, project: str = "", session_id: str = "", top_k: int = 5,
                   call: CallContext = None) -> dict:
    """Search your past Claude Code / Codex sessions by meaning and words. project, session_id narrow it.
    top_k: 1-20. session_read(session_id, offset=index-5) shows a hit's context. The last seconds' turns may not
    be indexed yet."""
    query = (query or "").strip()
    if not query:
        raise UserError("query is empty: say in words what you are looking for.")
    if not 1 <= top_k <= 20:
        raise UserError(f"top_k must be from 1 to 20, got {top_k}.")
    if session_id:
        session_id = _check_session_id(session_id)
    sessions = service(call.host)
    hits = sessions.search(call.agent, query[:2000], (project or "").strip(), session_id, top_k)
    if hits is None:
        raise UserError("session search needs the memory plugin (persmem-plugin-memory-hnsw), which is not loaded "
                        "here; session_list and session_read work without it.")
    results = [{"session_id": h.get("session_id"), "client": h.get("client"), "project": h.get("project"),
                "index": h.get("index"), "role": h.get("role"), "time": h.get("time"),
                "score": round(float(h.get("score", 0.0)), 4), "text": cut(str(h.get("text", "")), SEARCH_TURN_CHARS)}
               for h in hits if sessions.owns(call.agent, h.get("client"), h.get("session_id"))][:top_k]
    reply = {"results": results}
    if not results:
        reply["note"] = NOTHING_RELEVANT
    while len(results) > 1 and _size(reply) > REPLY_CHARS:
        results.pop()
    pending = sessions.pending()
    if pending:
        reply["indexing"] = pending
    return reply


ALL_TOOLS = [session_list, session_read, session_search]
