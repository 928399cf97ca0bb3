"""The dashboard's Sessions panel: the logged-in agent's own captured sessions (list, one transcript, search),
and how far their indexing for search has got (a progress bar, kept live by an event stream while turns wait:
after a `persmem sessions import` of a year of transcripts, that is minutes).

Plain data, a template (panel/sessions.html) and a small script (panel/sessions.js, the progress bar only), no
web framework. Every value reaches the page through Jinja's autoescape; assistant and user text is shown as the
dashboard's sanitised Markdown rendering (`view.markdown`), tool calls and outputs as plain text, collapsed.
Everything goes through the service with `view.agent`, and a search hit is shown only when the service says this
agent captured that session, so no other agent's session can appear here whatever the search answers.
"""

from __future__ import annotations

import json
from importlib import resources

import anyio

from persmem_core.sdk import UserError

from .service import service
from .transcripts import CLIENTS

FILES = resources.files("persmem_sessions") / "panel"
LIST_LIMIT = 200  # sessions listed (the latest first)
PAGE_TURNS = 100  # turns of one transcript per page
OPEN_CHARS = 1500  # a user or assistant turn longer than this starts collapsed (a tool turn always does)
MARKDOWN_CHARS = 20_000  # longer turns are shown as plain text (rendering is the page's slowest part)
SEARCH_TOP_K = 20
QUERY_CHARS = 2000
PREVIEW_CHARS = 160
PROGRESS_SECONDS = 1.0  # how often the live progress bar looks


def _service(view):
    sessions = service(view.host)
    if sessions is None:
        raise UserError("the sessions plugin is not running in this server (it starts with `persmem serve`).")
    return sessions


def context(view) -> dict:
    sessions = _service(view)
    session_id, query = view.param("session"), view.param("q")
    if session_id:
        return transcript(view, sessions, session_id)
    if query:
        return search(view, sessions, query)
    return listing(view, sessions)


def _projects(sessions, agent: str) -> list[str]:
    return sorted({meta.project for meta in sessions.sessions_of(agent)})


def listing(view, sessions) -> dict:
    project = view.param("project")
    metas = sessions.sessions_of(view.agent, project)
    rows = [_row(meta) for meta in metas[:LIST_LIMIT]]
    caption = (f"{len(metas)} session{'' if len(metas) == 1 else 's'}" + (f" in {project}" if project else "")
               + (f", the latest {LIST_LIMIT} shown" if len(metas) > LIST_LIMIT else ""))
    return {"mode": "list", "projects": _projects(sessions, view.agent), "sessions": rows,
            "indexing": indexing_state(sessions.indexing(view.agent)),
            "caption": caption if metas else "No sessions yet: `persmem hooks install` captures them from now on, "
                                             "`persmem sessions import` brings in those already on this machine."}


def _row(meta) -> dict:
    return {"session_id": meta.session_id, "client": meta.client, "project": meta.project, "cwd": meta.cwd,
            "started": meta.first_time, "last": meta.last_time, "turns": meta.turns, "title": meta.title,
            "redactions": meta.redactions}


def transcript(view, sessions, session_id: str) -> dict:
    client = view.param("client")
    if client not in CLIENTS:
        client = ""
    offset = _whole(view.param("offset"))
    meta, turns = sessions.turns(view.agent, session_id[:128], offset, PAGE_TURNS, client)
    shown = [_turn(view, turn) for turn in turns]
    last = offset + len(turns)
    return {"mode": "read", "projects": _projects(sessions, view.agent), "session": _row(meta), "turns": shown,
            "offset": offset, "previous": max(0, offset - PAGE_TURNS) if offset else None,
            "next": last if last < meta.turns else None,
            "caption": f"turns {offset + 1 if turns else offset}–{last} of {meta.turns}"}


def _whole(text: str) -> int:
    return int(text) if text.isdigit() and len(text) < 10 else 0


def _turn(view, turn: dict) -> dict:
    text = str(turn.get("text", ""))
    role = str(turn.get("role", ""))
    markdown = role in ("user", "assistant") and len(text) <= MARKDOWN_CHARS
    return {"index": turn.get("index"), "role": role, "time": turn.get("time", ""), "text": text,
            "html": view.markdown(text) if markdown else None,
            "open": role != "tool" and len(text) <= OPEN_CHARS,
            "preview": " ".join(text[:PREVIEW_CHARS * 2].split())[:PREVIEW_CHARS], "chars": len(text)}


def search(view, sessions, query: str) -> dict:
    project = view.param("project")
    hits = sessions.search(view.agent, query[:QUERY_CHARS], project, "", SEARCH_TOP_K)
    if hits is None:
        return {"mode": "search", "projects": _projects(sessions, view.agent), "hits": [],
                "caption": "Search needs the memory plugin (persmem-plugin-memory-hnsw), which indexes the turns."}
    shown = []
    for hit in hits:  # the memory side answers for this agent; the archive confirms each session is its own
        if not sessions.owns(view.agent, hit.get("client"), hit.get("session_id")):
            continue
        shown.append({**_turn(view, hit), "session_id": hit["session_id"], "client": hit["client"],
                      "project": hit.get("project", ""), "score": hit.get("score")})
    return {"mode": "search", "projects": _projects(sessions, view.agent), "hits": shown,
            "caption": f"{len(shown)} best turn{'' if len(shown) == 1 else 's'} for “{query[:200]}”"
                       + (f" in {project}" if project else "")}


def indexing_state(counts: dict) -> dict:
    """The progress bar's figures and its line of text, for the page and for each live update alike."""
    turns, indexed = counts["turns"], min(counts["indexed_turns"], counts["turns"])
    if not counts["indexes"]:
        text = (f"{turns:,} turns archived; nothing indexes them for search here (the memory plugin, "
                "persmem-plugin-memory-hnsw, does): they are indexed once it runs.")
    elif indexed < turns:
        text = (f"Indexing for search: {indexed:,} of {turns:,} turns ({indexed * 100 // max(turns, 1)}%), "
                f"{counts['sessions_waiting']:,} session(s) waiting.")
    else:
        text = f"All {turns:,} turns are indexed for search."
    return {"turns": turns, "indexed": indexed, "busy": counts["indexes"] and indexed < turns, "text": text}


async def events(view):
    """While turns wait to be indexed: the progress bar's figures ("indexing" events, JSON), each time they
    change, and a last one when all are indexed."""
    sessions = _service(view)
    last = None
    while True:
        state = indexing_state(await anyio.to_thread.run_sync(sessions.indexing, view.agent))
        if state != last:
            yield {"event": "indexing", "data": json.dumps(state)}
            last = state
        if not state["busy"]:
            return
        await anyio.sleep(PROGRESS_SECONDS)


def register(register):
    register("sessions", title="Sessions", template=(FILES / "sessions.html").read_text(), context=context,
             order=40, events=events, script=(FILES / "sessions.js").read_text())
