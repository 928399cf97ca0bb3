"""The memory plugin's answers to the sessions plugin (its hookspecs.py): session turns indexed in their own
private collection and searched back, a session's briefing, the memories a prompt recalls.

Turns live in the collection `sessions`, one memory per turn: a deterministic id (from the agent, the client,
the session and the turn's index, so a turn indexed twice is stored once), the agent as author, the role as
type, tags "session:<id>" and "client:<c>", the turn's time as created, and the working folder plus the
neighbouring turns' text as the keyword-only context. `[memory] private_collections` keeps each agent's turns
its own (permissions.py). The curated `memories` collection is what briefings and recall draw on: never turns,
and never a memory that no longer holds (superseded by a later one, or expired; search/weighing.py).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
import threading
import time
from pathlib import PurePath

from persmem_core.sdk import UserError, prompt_line, valid_text

from .collection import Hit, NewMemory, WriteFailed
from .store.contexts import MAX_CONTEXT_CHARS, conversation_contexts
from .permissions import BOOTSTRAP_TYPES
from .store.query import Filters
from .store.records import Memory, iso, parse_iso, review_due
from .search.replies import above_floor, shaped_content
from .access import AgentMemory
from .preferences import asks_for_preferences, standing_preferences
from .service import MemoryService

log = logging.getLogger("persmem.memory.sessions")

SESSIONS = "sessions"  # the collection of session turns
MEMORIES = "memories"  # the curated memories briefings and recall draw on
INDEX_BATCH = 128  # turns embedded and logged per durable write
TURN_CONTEXT_CHARS = 300  # neighbouring turns' text indexed with a turn (keyword search only)
CWD_CONTEXT_CHARS = 1000  # the working folder's start kept in a turn's context (the whole must stay in its limit)
SEARCHED_CHARS = 4000  # a query's or a prompt's start that is searched
RECALL_MIN_WORDS = 3  # "yes", "go on", "hello": too little said to recall anything by
RECALL_PASSAGE_CHARS = 800  # the part of a recalled memory handed to a prompt
TURN_ID_RE = re.compile(r"^turn-(?P<client>[a-z]+)-[0-9a-f]{16}-(?P<index>\d+)$")

# The sessions plugin indexes from one worker thread; a second caller (a restart's resume, a test) waits, so
# "which ids are new" and storing them happen as one step.
_index_lock = threading.Lock()


# -- indexing -----------------------------------------------------------------------------------------------

def turn_id(agent: str, client: str, session_id: str, index: int) -> str:
    """The memory id of a turn: the same turn always gets the same id (the session id is hashed: it may be
    longer than an id may be, and holds characters ids do not)."""
    digest = hashlib.blake2b(f"{agent}\0{client}\0{session_id}".encode(), digest_size=8).hexdigest()
    return f"turn-{client}-{digest}-{index}"


def index_turns(memories: MemoryService, agent: str, turns: list[dict]) -> int:
    """Store `agent`'s `turns` in `sessions`, each once; how many were new. A turn the store or the embedder
    refuses is logged and left out, so it never stops the other turns (nor, in the sessions plugin's worker,
    every other session); only a write the disk refused raises, for the worker to try again later."""
    items = _new_memories(memories.config, agent, turns)
    if not items:
        return 0
    new = 0
    memory = memories.as_agent(agent)
    with _index_lock:
        for start in range(0, len(items), INDEX_BATCH):
            fresh = _not_indexed(memory, items[start:start + INDEX_BATCH])
            if fresh:
                new += _store(memory, fresh)
    return new


def _not_indexed(memory: AgentMemory, batch: list[NewMemory]) -> list[NewMemory]:
    """The memories of `batch` not stored yet. An id held by another author's memory cannot be this turn's (it
    was named by a memory_store before private collections refused chosen ids, or `sessions` is not private
    here): the turn is left out, and the log says so, since its session is then not wholly searchable."""
    fresh = []
    for item in batch:
        held = memory.author_of(SESSIONS, item.memory_id)
        if held is None:
            fresh.append(item)
        elif held != memory.agent:
            log.warning("session turn %s of %s not indexed: its id is taken by a memory of %s in collection %r",
                        item.memory_id, memory.agent, held, SESSIONS)
    return fresh


def _store(memory: AgentMemory, items: list[NewMemory]) -> int:
    """Store `items` in one durable write; when one of them is refused (by the store: its size, its id taken
    meanwhile; by the embedder: a text it cannot read), each on its own, leaving out the refused ones."""
    try:
        return _count_stored(memory.store(SESSIONS, items, dedup=False))
    except WriteFailed:
        raise
    except (UserError, TypeError, ValueError):
        pass  # which one? store them one by one
    new = 0
    for item in items:
        if memory.author_of(SESSIONS, item.memory_id) is not None:
            continue
        try:
            new += _count_stored(memory.store(SESSIONS, [item], dedup=False))
        except WriteFailed:
            raise
        except UserError as exc:  # says what is wrong with the memory, never its content
            log.warning("session turn %s of %s not indexed: %s", item.memory_id, memory.agent, str(exc)[:300])
        except (TypeError, ValueError) as exc:  # the embedder's message may quote the text: its kind only
            log.warning("session turn %s of %s not indexed: the embedder refused its text (%s)", item.memory_id,
                        memory.agent, type(exc).__name__)
    return new


def _count_stored(results: list[dict]) -> int:
    return sum(result["status"] == "stored" for result in results)


def _new_memories(config, agent: str, turns: list[dict]) -> list[NewMemory]:
    """The memories of the turns worth storing (a turn with no text has nothing to find), in the order given;
    each session's consecutive turns give each other keyword context."""
    items = []
    for turn in turns:
        try:
            item = _turn_memory(config, agent, turn)
        except (KeyError, TypeError, ValueError) as exc:  # one malformed turn must not stall the worker
            log.warning("session turn not indexed (%s: %s)", type(exc).__name__, exc)
            continue
        if item is not None:
            items.append((turn, item))
    by_session = itertools.groupby(items, key=lambda pair: (pair[0]["client"], pair[0]["session_id"]))
    for _, run in by_session:
        run = list(run)
        for (turn, item), (context, question) in zip(run, conversation_contexts([item.content for _, item in run],
                                                                               TURN_CONTEXT_CHARS), strict=True):
            cwd = valid_text(_one_line(turn.get("cwd", "")))[:CWD_CONTEXT_CHARS]
            item.context = f"{cwd}\n{context}"[:MAX_CONTEXT_CHARS]
            item.reply_to = question
    return [item for _, item in items]


def _turn_memory(config, agent: str, turn: dict) -> NewMemory | None:
    text = valid_text(turn["text"]).strip()
    if not text:
        return None
    client, session_id, index = turn["client"], turn["session_id"], int(turn["index"])
    if not re.fullmatch(r"[a-z]{1,16}", client) or index < 0:  # (a longer client would make too long an id)
        raise ValueError(f"client {client!r}, index {index}")
    created = None
    if turn.get("time"):
        try:
            created = parse_iso(turn["time"])
        except ValueError:
            created = None  # a turn without a readable time is stored at the time it is indexed
    return NewMemory(content=text[:config.max_content_chars], project=(turn.get("project") or "general")[:64],
                     type=turn.get("role") or "turn", tags=[f"session:{session_id}", f"client:{client}"],
                     memory_id=turn_id(agent, client, session_id, index), created=created)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# -- reading turns back -------------------------------------------------------------------------------------

def turn_fields(memory: Memory) -> dict:
    """A session turn's own fields (its session, client, index, role), read from its id and tags."""
    tags = dict(tag.split(":", 1) for tag in memory.tags if ":" in tag)
    match = TURN_ID_RE.match(memory.id)
    return {"session_id": tags.get("session", ""), "client": tags.get("client", ""),
            "index": int(match["index"]) if match else -1, "role": memory.type}


def as_turn(memory: Memory) -> dict:
    """A stored turn as the sessions plugin's hookspecs describe it."""
    return {**turn_fields(memory), "text": memory.content, "time": iso(memory.created),
            "cwd": memory.context.split("\n", 1)[0], "project": memory.project}


def session_hits(memory: AgentMemory, query: str, *, top_k: int, filters: Filters) -> list[Hit]:
    """The agent's own turns best matching `query` (whatever `filters` say of authors), best first."""
    filters = Filters(project=filters.project, type=filters.type, tags=filters.tags, since=filters.since,
                      until=filters.until, author=memory.agent)
    return memory.search(SESSIONS, query[:SEARCHED_CHARS], top_k=top_k, filters=filters)


def search_turns(memories: MemoryService, agent: str, query: str, project: str, session_id: str,
                 top_k: int) -> list[dict]:
    filters = Filters(project=project or None, tags=[f"session:{session_id}"] if session_id else [])
    hits = relevant_turns(session_hits(memories.as_agent(agent), query, top_k=top_k, filters=filters),
                          memories.config)
    return [{**as_turn(hit.memory), "score": round(hit.score, 3)} for hit in hits]


def relevant_turns(hits: list[Hit], config) -> list[Hit]:
    """memory_search's floor (above_floor, [memory] search_min_relative_score) over the turns, after the bar that
    says whether anything is relevant at all: the floor is relative to the best hit, so a query no turn is about
    (a word said nowhere) would keep its best unrelated turns. Unless one hit shares a word with the query (BM25)
    or comes near it in meaning (cosine >= [memory] recall_min_similarity, the prompt hook's bar), none is."""
    if not any((h.lexical or 0) > 0 or (h.dense or 0) >= config.recall_min_similarity for h in hits):
        return []
    return above_floor(hits, config.search_min_relative_score)


# -- recall: memories relevant to a prompt ------------------------------------------------------------------

def recall(memories: MemoryService, agent: str, project: str, prompt: str, exclude_ids, top_k: int) -> list[dict]:
    """The curated memories relevant to `prompt`, those of `project` first: only those whose similarity in
    meaning reaches `[memory] recall_min_similarity` (an absolute bar: the fused search score only ranks, it
    says nothing about relevance), never an identity or directive entry (those are their author's voice).
    Each gives its author, and its editor when another agent made its current version (attribution): the
    sessions plugin renders them with the text, which is the memory's words only. A prompt that leans on the
    user's own likes ("the flags I like") first gets the project's standing preferences (preferences.py), whose
    similarity in meaning to such a prompt is too low for the bar; their "score" is 0.0 (not found by meaning)."""
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
    for hit in found.values():
        later = memory.replacement_of(MEMORIES, hit.memory, now)
        if later is None:
            recalled.append(_recalled(hit.memory, round(hit.dense, 3), now))
        elif later.id not in exclude and all(item["id"] != later.id for item in recalled):
            recalled.append(_recalled(later, round(hit.dense, 3), now, replaces=hit.memory))
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
        if current.id in seen:
            continue
        seen.add(current.id)
        if later is not None:
            replaced[later.id] = item
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
