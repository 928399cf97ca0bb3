"""The memory plugin's answers to a session (the sessions plugin's hookspecs.py): the memories a prompt recalls
and the briefing a session starts with. Both draw on the curated `memories` collection only: never session
turns, never a memory that no longer holds (superseded by a stored link, expired; search/weighing.py), and a
memory a later one restates shows as that later one (lifecycle/restatement.py), saying which it replaces.
"""

from __future__ import annotations

import re
import time
from pathlib import PurePath

from persmem_core.sdk import prompt_line

from .access import AgentMemory
from .lifecycle.restatement import says_change
from .collection import Hit
from .permissions import BOOTSTRAP_TYPES
from .preferences import asks_for_preferences, standing_preferences
from .search.replies import shaped_content
from .service import MemoryService
from .store.query import Filters
from .store.records import Memory, iso, review_due

MEMORIES = "memories"  # the curated memories briefings and recall draw on
SEARCHED_CHARS = 4000  # a prompt's start that is searched
RECALL_MIN_WORDS = 3  # "yes", "go on", "hello": too little said to recall anything by
RECALL_PASSAGE_CHARS = 800  # the part of a recalled memory handed to a prompt


# -- recall: memories relevant to a prompt ------------------------------------------------------------------

def recall(memories: MemoryService, agent: str, project: str, prompt: str, exclude_ids, top_k: int) -> list[dict]:
    """The curated memories relevant to `prompt`, those of `project` first: only those whose similarity in
    meaning reaches `[memory] recall_min_similarity` (an absolute bar: the fused search score only ranks, it
    says nothing about relevance), never an identity or directive entry (those are their author's voice).
    Each gives its author, and its editor when another agent made its current version (attribution): the
    sessions plugin renders them with the text, which is the memory's words only. A prompt that leans on the
    user's own likes ("the flags I like") first gets the project's standing preferences (preferences.py), whose
    similarity in meaning to such a prompt is too low for the bar; their "score" is 0.0 (not found by meaning).
    A memory a later one restates comes as that later one (`replaces`: its id). When the prompt says that
    something changed ("moved to", "now", "instead"...: restatement.says_change), the best memory found that
    nothing restates yet is marked `may_be_stale`: the assistant is told to store the new fact superseding it."""
    if len(re.findall(r"\w\w+", prompt)) < RECALL_MIN_WORDS or not memories.as_agent(agent).exists(MEMORIES):
        return []
    memory = memories.as_agent(agent)
    exclude = set(exclude_ids or ())
    recalled = []
    if asks_for_preferences(prompt):
        preferences = standing_preferences(memory, MEMORIES, project, limit=RECALLED_PREFERENCES + len(exclude),
                                           now=time.time())
        recalled = [_recalled(m, 0.0) for m in preferences if m.id not in exclude][:RECALLED_PREFERENCES]
        exclude |= {item["id"] for item in recalled}
    floor = memories.config.recall_min_similarity
    pool = top_k + min(len(exclude), 40) + 5
    found: dict[str, Hit] = {}
    for filters in (Filters(project=project or None), Filters()):  # the project's first, then everyone's
        for hit in _relevant(memory, prompt, filters, pool, floor):
            if hit.memory.id not in exclude:
                found.setdefault(hit.memory.id, hit)
        if len(found) >= top_k or not project:
            break
    now = time.time()
    changed = says_change(prompt)  # "billing moved to 9090": the best memory about it may be what changed
    listed = {item["id"]: item for item in recalled}
    for hit in found.values():
        later = memory.replacement_of(MEMORIES, hit.memory, now)
        if later is None:
            if hit.memory.id in listed:  # listed already, as what an earlier hit's memory restates
                continue
            listed[hit.memory.id] = item = _recalled(hit.memory, round(hit.dense, 3), now)
            if changed:
                item["may_be_stale"], changed = True, False
            recalled.append(item)
        elif later.id in listed:
            listed[later.id].setdefault("replaces", hit.memory.id)
        elif later.id not in exclude:
            listed[later.id] = item = _recalled(later, round(hit.dense, 3), now, replaces=hit.memory)
            recalled.append(item)
    return recalled[:top_k]


def _recalled(memory: Memory, score: float, now: float | None = None, replaces: Memory | None = None) -> dict:
    """One recall answer (the sessions plugin's `Recalled`): `replaces`, the older memory it restates (found
    in its place); review_due when its review date passed."""
    item = {"id": memory.id, "score": score, **attribution(memory),
            "text": shaped_content(memory.content, set(), RECALL_PASSAGE_CHARS)["content"], "project": memory.project}
    if replaces is not None:
        item["replaces"] = replaces.id
    if now is not None and review_due(memory.review_after, now):
        item["review_due"] = True
    return item


def _current_hits(memory: AgentMemory, text: str, *, top_k: int, filters: Filters,
                  recency_weight: float = 0.0) -> list[Hit]:
    """Hits of the curated memories that still hold: a memory a later one superseded, or past its valid_until,
    is history, never handed to a session as what is true (memory_search still finds them, when asked)."""
    return memory.search(MEMORIES, text, top_k=top_k, filters=filters, recency_weight=recency_weight,
                         include_superseded=False, include_expired=False)


def attribution(memory: Memory) -> dict:
    """Who wrote a memory handed to a session: {"author"}, and {"editor"} when another agent (or persmem's
    consolidation) made its current version, so words an editor put in a memory never pass for its author's.
    Every memory says it, the session's own agent's too: an unmarked line would be what a forged one imitates."""
    who = {"author": memory.author}
    if memory.editor and memory.editor != memory.author:
        who["editor"] = memory.editor
    return who


def _relevant(memory: AgentMemory, text: str, filters: Filters, pool: int, floor: float) -> list[Hit]:
    """Hits of `memories` for `text` that the agent may see, at or above `floor` in meaning, bootstrap entries
    left out, by similarity."""
    hits = _current_hits(memory, text[:SEARCHED_CHARS], top_k=pool, filters=filters)
    hits = [hit for hit in hits if hit.dense is not None and hit.dense >= floor
            and hit.memory.type not in BOOTSTRAP_TYPES]
    return sorted(hits, key=lambda hit: hit.dense, reverse=True)


# -- the briefing a session starts with ---------------------------------------------------------------------

# Shares of the whole briefing's size: pinned entries are the agent's own voice and come whole first; mail
# (the mail plugin's section) takes about a tenth.
PINNED_SHARE, HANDOFF_SHARE, PREFERENCE_SHARE, RELEVANT_SHARE = 0.35, 0.2, 0.15, 0.2
RELEVANT_MAX = 6  # memories listed as relevant to the project
PREFERENCES_MAX = 8  # standing preferences listed (preferences.py)
RECALLED_PREFERENCES = 3  # preferences a prompt that leans on them brings
ITEM_MIN_CHARS = 160  # an entry shows at least this much, or is left out


def briefing(memories: MemoryService, agent: str, project: str, cwd: str, budget_chars: int) -> list[dict]:
    """The memory plugin's briefing sections: the agent's identity and directive entries, the project's latest
    handoff, the memories most relevant to the project and the working folder. Empty ones are left out."""
    if not memories.as_agent(agent).exists(MEMORIES):
        return []
    memory = memories.as_agent(agent)
    now = time.time()
    # Only what still holds: neither superseded nor expired.
    pinned = sorted(memory.pinned(MEMORIES, current_only=True, now=now),
                    key=lambda m: (m.type != "identity", m.type, m.created))  # who the agent is, first
    sections = []
    if pinned:
        sections.append(_section("Your identity and directives", pinned,
                                 int(budget_chars * PINNED_SHARE), 0))
    handoffs = memory.handoffs(MEMORIES, project, limit=1, current_only=True, now=now) if project else []
    if handoffs:
        sections.append(_section(f"Latest handoff in project {project}", handoffs,
                                 int(budget_chars * HANDOFF_SHARE), 1))
    shown = {m.id for m in (*pinned, *handoffs)}
    replaced: dict[str, Memory] = {}  # shown id -> the older memory it restates (shown in its place)
    preferences = _current(memory, standing_preferences(memory, MEMORIES, project, limit=PREFERENCES_MAX, now=now),
                           shown, replaced, now)
    if preferences:
        sections.append(_section(f"Standing preferences{f' in project {project}' if project else ''}",
                                 preferences, int(budget_chars * PREFERENCE_SHARE), 2, replaced, now))
    shown |= {m.id for m in preferences}
    relevant = _current(memory, [m for m in _project_memories(memory, project, cwd) if m.id not in shown], shown,
                        replaced, now)[:RELEVANT_MAX]
    if relevant:
        sections.append(_section(f"Memories relevant to {project or 'this folder'}", relevant,
                                 int(budget_chars * RELEVANT_SHARE), 3, replaced, now))
    return [section for section in sections if section["text"]]


def _current(memory: AgentMemory, items: list[Memory], shown: set[str], replaced: dict[str, Memory],
             now: float) -> list[Memory]:
    """`items` as a session should see them: each one a later memory restates (lifecycle/restatement.py)
    replaced by that later one, once, and none already `shown`; `replaced` gets later id -> the older one."""
    out, seen = [], set(shown)
    for item in items:
        later = memory.replacement_of(MEMORIES, item, now)
        current = later or item
        if later is not None:
            replaced.setdefault(later.id, item)  # (also when the later one is listed already)
        if current.id in seen:
            continue
        seen.add(current.id)
        out.append(current)
    return out


def _project_memories(memory: AgentMemory, project: str, cwd: str) -> list[Memory]:
    """The memories most relevant to `project` and the working folder: the project's own best matches for its
    name and the folder's names (recent ones favoured), then others' whose meaning is close to them."""
    words = [project, *_folder_words(cwd)]
    query = " ".join(dict.fromkeys(word for word in words if word))
    if not query:
        return []
    found: list[Memory] = []
    if project:
        hits = _current_hits(memory, query, top_k=RELEVANT_MAX * 3, filters=Filters(project=project),
                             recency_weight=0.3)
        found += [hit.memory for hit in hits if hit.memory.type not in BOOTSTRAP_TYPES | {"handoff"}]
    if len(found) < RELEVANT_MAX:
        others = _relevant(memory, query, Filters(), RELEVANT_MAX * 3, memory.config.recall_min_similarity)
        found += [hit.memory for hit in others if hit.memory.type != "handoff" and hit.memory.project != project]
    return found


def _folder_words(cwd: str) -> list[str]:
    """The last few folder names of the working folder (where the project's own words are)."""
    parts = [part for part in PurePath(cwd or "/").parts[1:] if part and not part.startswith(".")]
    return parts[-3:]


def _section(title: str, items: list[Memory], chars: int, priority: int, replaced: dict[str, Memory] | None = None,
             now: float | None = None) -> dict:
    """A briefing section listing `items` within `chars`, one line each (item_line): each whole when it fits its
    share (what a short one leaves goes to the next), else cut and pointing to memory_get; one that cannot show
    ITEM_MIN_CHARS of its text is left out, and the section says so."""
    lines, ids, left = [], [], chars
    for n, memory in enumerate(items):
        line = item_line(memory, max(left // (len(items) - n), 0), (replaced or {}).get(memory.id), now)
        if len(line) + 1 > left:
            if lines:
                lines.append(f"({len(items) - n} more left out for space)")
            break
        lines.append(line)
        ids.append(memory.id)
        left -= len(line) + 1
    return {"title": title, "text": "\n".join(lines), "priority": priority, "memory_ids": ids}


def item_line(memory: Memory, width: int, replaces: Memory | None = None, now: float | None = None) -> str:
    """One memory as one line of a briefing: a JSON object (persmem_core.sdk.prompt_line) saying who wrote it
    ("by", and "edited_by" when another agent made its current version), its type, date and id, and its text,
    whole when the line fits `width`, else its start (at least ITEM_MIN_CHARS of it) with where the whole is.
    Whatever the memory holds (line breaks, headings, quotes, tags) stays inside its "text": nothing it says
    can start a line, a section or another entry, or pass for another author's."""
    who = attribution(memory)
    fields = {"by": who["author"], **({"edited_by": who["editor"]} if "editor" in who else {}),
              "type": memory.type, "date": iso(memory.updated)[:10], "id": memory.id}
    if replaces is not None:  # the older memory it restates, shown in its place: its id and first words
        fields["replaces"] = f"{replaces.id}: {_first_words(replaces.content)}"
    if now is not None and review_due(memory.review_after, now):
        fields["review_due"] = True
    whole = prompt_line({**fields, "text": memory.content})
    if len(whole) <= width:
        return whole
    fields["cut"] = f"memory_get {memory.id} gives the whole"
    room = width - len(prompt_line({**fields, "text": ""}))
    line = whole
    for _ in range(6):  # escapes (a line break is two characters, an invisible one six) may need a second try
        shown = shaped_content(memory.content, set(), max(ITEM_MIN_CHARS, room))["content"]
        line = prompt_line({**fields, "text": shown})
        if len(line) <= width or room <= ITEM_MIN_CHARS:
            break
        room -= len(line) - width
    return line


REPLACED_WORDS = 8  # of an older memory a briefing line says it replaces


def _first_words(text: str) -> str:
    words = text.split()
    return " ".join(words[:REPLACED_WORDS]) + (" …" if len(words) > REPLACED_WORDS else "")
