"""What a session starts with: chorus_init, and bootstrap_update for the entries it pins."""

from __future__ import annotations

import time

from persmem_core.sdk import CallContext, UserError, session_start_sections

from ..search.replies import memory_list
from ..service import NAME
from ..store.query import did_you_mean, parse_label, parse_tags, shown
from ..store.records import public
from ..store.new_memory import NewMemory
from .arguments import Tags, caller_memory, check_not_reserved


def chorus_init(agent: str = "", project: str = "general", call: CallContext = None) -> dict:
    """Call once at a session's start: your pinned identity and directive entries (bootstrap_update), the last 3
    handoffs of `project`, and `sections` other plugins add ([{title, text}], e.g. your unread mail's senders
    and subjects; nothing is marked read). Long entries are cut (truncated; memory_get has them whole).
    agent: leave empty (you are the caller)."""
    if agent and agent != call.agent:
        raise UserError(f"you are authenticated as {call.agent!r}; chorus_init cannot load {shown(agent)}'s "
                        "session.")
    me = call.agent
    config = call.host.section("memory")
    memory = caller_memory(call)
    memory.check_collection("memories")
    pinned = memory.pinned("memories")
    # The last handoffs, superseded ones included (each is the state of its day), but never an expired one.
    handoffs = memory.handoffs("memories", project, limit=3, current_only=False, now=time.time())
    pinned = sorted(pinned, key=lambda m: (m.type, m.created))
    # Pinned entries are the agent's own voice: whole when they fit in half the reply budget together.
    pinned_width = max(config.search_passage_chars, config.search_reply_chars // 2 // max(1, len(pinned)))
    reply = {
        "agent": me,
        "project": project,
        "pinned": memory_list(pinned, pinned_width),
        "handoffs": memory_list(handoffs, config.search_passage_chars),
        # The sections a SessionStart briefing carries, but the memory plugin's own (the lists above).
        "sections": [{"title": s["title"], "text": s["text"]} for s in session_start_sections(
            call.host, me, project, "", config.search_reply_chars // 2, leave_out=(NAME,))],
    }
    if any(item.get("truncated") for item in (*reply["pinned"], *reply["handoffs"])):
        reply["note"] = "Entries marked truncated show their start only; memory_get(memory_id) returns the whole."
    if not handoffs:
        projects = memory.names_in_use("memories")["project"]
        if projects and project not in projects:
            reply["hint"] = did_you_mean("project", project, projects)
    return reply


def bootstrap_update(entry_id: str, content: str, tags: Tags = "", entry_type: str = "identity",
                     project: str = "general", call: CallContext = None) -> dict:
    """Create or overwrite one of your pinned entries (identity, directive...) that chorus_init returns.
    entry_id: a stable name of yours, e.g. "kite-identity" (one another agent uses is refused); overwriting
    keeps the old version. tags: "a,b" or a list."""
    agent_memory = caller_memory(call)
    tag_list = parse_tags(tags)
    existing = agent_memory.own_bootstrap_entry("memories", entry_id, entry_type)
    if existing is not None:
        # No grants here: bootstrap_update never changes another agent's entry (also re-checked under the lock).
        memory = agent_memory.update("memories", entry_id, grants=False, content=content, tags=tag_list,
                                     type=parse_label(entry_type, "entry_type"),
                                     project=parse_label(project, "project"))
        return {"status": "updated", **public(memory)}
    check_not_reserved(entry_id, "entry_id")
    item = NewMemory(content=content, project=parse_label(project, "project"), type=parse_label(entry_type, "entry_type"),
                     tags=tag_list, memory_id=entry_id)
    return agent_memory.store("memories", [item], dedup=False)[0]
