"""The memory plugin's answers to the sessions plugin (its hookspecs.py) about session turns: indexed in their
own private collection and searched back (session_briefing.py answers a session's start and its prompts).

Turns live in the collection `sessions`, one memory per turn: a deterministic id (from the agent, the client,
the session and the turn's index, so a turn indexed twice is stored once), the agent as author, the role as
type, tags "session:<id>" and "client:<c>", the turn's time as created, and the working folder plus the
neighbouring turns' text as the keyword-only context. `[memory] private_collections` keeps each agent's turns
its own (permissions.py).
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import re
import threading

from persmem_core.sdk import UserError, valid_text

from .collection import Hit, NewMemory, WriteFailed
from .store.contexts import MAX_CONTEXT_CHARS, conversation_contexts
from .store.query import Filters
from .store.records import Memory, iso, parse_iso
from .search.replies import above_floor
from .access import AgentMemory
from .service import MemoryService

log = logging.getLogger("persmem.memory.sessions")

SESSIONS = "sessions"  # the collection of session turns
INDEX_BATCH = 128  # turns embedded and logged per durable write
TURN_CONTEXT_CHARS = 300  # neighbouring turns' text indexed with a turn (keyword search only)
CWD_CONTEXT_CHARS = 1000  # the working folder's start kept in a turn's context (the whole must stay in its limit)
SEARCHED_CHARS = 4000  # a query's start that is searched
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
