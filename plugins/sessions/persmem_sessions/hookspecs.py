"""What the sessions plugin asks other plugins, without importing them (the memory plugin answers them). Every
answer is optional: without a memory plugin, sessions are archived and listed but neither indexed nor searched.
The briefing a session starts with is the core's `briefing_sections` hook (persmem_core/hookspecs.py), gathered
with `persmem_core.sdk.session_start_sections`.

A turn, as handed to `index_session_turns` and returned by `search_session_turns`:
    {"session_id": str, "client": "claude"|"codex", "index": int (0-based, in the session), "role":
     "user"|"assistant"|"tool", "text": str (redacted; tool output truncated), "time": ISO 8601 str, "cwd": str,
     "project": str}
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

from persmem_core.sdk import hookspec


class Turn(TypedDict):
    """One turn of a session, as `index_session_turns` receives it and `search_session_turns` returns it (with a
    "score" added)."""

    session_id: str
    client: Literal["claude", "codex"]
    index: int
    role: Literal["user", "assistant", "tool"]
    text: str
    time: str
    cwd: str
    project: str
    score: NotRequired[float]


class Recalled(TypedDict):
    """One `recall_for_prompt` answer item."""

    id: str
    text: str
    score: float
    project: str
    author: str
    editor: NotRequired[str]
    replaces: NotRequired[str]  # the id of an older memory it restates, found in its place
    review_due: NotRequired[bool]  # its review date passed: check it still holds
    may_be_stale: NotRequired[bool]  # the prompt says something changed, and this is what it most likely changes


@hookspec
def index_session_turns(host, agent, turns: list[Turn]) -> int:
    """Make `turns` (of `agent`'s sessions) searchable. Idempotent: a turn (session_id, client, index) indexed
    twice is stored once. Return how many were new. Only `agent` may ever search them back."""


@hookspec(firstresult=True)
def search_session_turns(host, agent, query, project, session_id, top_k) -> list[Turn] | None:
    """`agent`'s own session turns best matching `query` (optionally only in `project` / `session_id`, empty
    string = any): a list of turns (above) each with a "score", best first; None when nothing can search."""


@hookspec(firstresult=True)
def recall_for_prompt(host, agent, project, prompt, exclude_ids, top_k) -> list[Recalled] | None:
    """Memories relevant to `prompt` above the answering plugin's score floor, none of `exclude_ids`:
    [{"id": str, "text": str, "score": float, "project": str, "author": str, "editor"?: str}] best first; "text"
    is the memory's words only, "author" who wrote it and "editor" who made its current version when that is
    someone else (the sessions plugin puts them in the prompt together, one line of JSON each); None when
    nothing can search."""
