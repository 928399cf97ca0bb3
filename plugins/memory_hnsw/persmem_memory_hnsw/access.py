"""One agent's door into the memory store: every read and write the tools, the panels and the answers to other
plugins make goes through here, and the permission rules (permissions.py) are applied here, once.

`MemoryService.as_agent(agent)` gives one. What it enforces:
- in a private collection (`[memory] private_collections`, like `sessions`) the agent reads, counts and changes
  only its own entries, and another's entry is answered like a missing one;
- a change (update, delete, unlink, a supersedes link) is the author's, or granted by `[memory] editors`
  (none in a private collection), and identity and directive entries are only ever their author's;
- pinned entries are the agent's own.
Nothing here hands out a Collection: a caller cannot reach past the rules.
"""

from __future__ import annotations

from .lifecycle.consolidation import consolidate
from .permissions import (
    BOOTSTRAP_TYPES,
    check_bootstrap_owner,
    check_visible,
    editors_in,
    is_private,
    own_filters,
    pinned_for,
    visible_to,
)
from .search.ranking import Hit
from .search.replies import LifecycleLinks
from .search.weighing import expired, review_due
from .store.new_memory import NewMemory
from .store.query import Filters
from .store.records import Head, Memory, new_id, summarize


class AgentMemory:
    """What `agent` may read and change in the memory service `memories`."""

    def __init__(self, memories, agent: str):
        self._memories, self.agent, self.config = memories, agent, memories.config

    # -- collections ------------------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """The collections there are (a private one is listed: what is in it is the agent's own)."""
        return sorted(self._memories.collections())

    def exists(self, collection: str) -> bool:
        return collection in self._memories.collections()

    def private(self, collection: str) -> bool:
        return is_private(self.config, collection)

    def count(self, collection: str) -> int:
        """How many live memories the agent can see in `collection` (its own only, in a private one)."""
        col = self._memories.collection(collection)
        return len(col.matching(Filters(author=self.agent))) if self.private(collection) else len(col.memories)

    def check_collection(self, collection: str) -> None:
        """A read of a collection that does not exist: the UserError naming those there are."""
        self._memories.collection(collection)

    # -- writing ----------------------------------------------------------------------------------------------
    def store(self, collection: str, items: list[NewMemory], *, dedup: bool = True) -> list[dict]:
        """Store `items` as the agent's (a new collection name is made, within [memory] max_collections); a
        supersedes link may name memories the agent may change."""
        col = self._memories.collection(collection, create=True)
        return col.store(items, author=self.agent, dedup=dedup, editors=editors_in(self.config, collection))

    def update(self, collection: str, memory_id: str, *, grants: bool = True, **changes) -> Memory:
        """A new version by the agent. `grants=False`: its own memories only, whatever [memory] editors say."""
        col = self._visible(collection, memory_id)
        editors = editors_in(self.config, collection) if grants else {}
        return col.update(memory_id, editor=self.agent, editors=editors, **changes)

    def delete(self, collection: str, memory_id: str) -> Memory:
        col = self._visible(collection, memory_id)
        return col.delete(memory_id, by=self.agent, editors=editors_in(self.config, collection))

    def unlink(self, collection: str, memory_id: str, supersedes_id: str | None) -> Memory:
        col = self._visible(collection, memory_id)
        return col.unlink(memory_id, supersedes_id=supersedes_id, by=self.agent,
                          editors=editors_in(self.config, collection))

    def link(self, collection: str, memory_id: str, supersedes: list[str]) -> Memory:
        col = self._visible(collection, memory_id)
        return col.link(memory_id, supersedes=supersedes, by=self.agent, editors=editors_in(self.config, collection))

    def validate(self, collection: str, memory_id: str, *, helpful: bool, note: str) -> Memory:
        return self._visible(collection, memory_id).validate(memory_id, by=self.agent, helpful=helpful, note=note)

    # -- reading ----------------------------------------------------------------------------------------------
    def get(self, collection: str, memory_id: str, *, wait_embedded: bool = False) -> Memory:
        """The whole memory. `wait_embedded`: one stored moments ago is first embedded (a link its embedding
        makes is part of the answer), for at most [memory] search_waits_ms."""
        col = self._memories.collection(collection)
        if wait_embedded and memory_id in col.rows.unembedded:
            col.wait_embedded(col.config.search_waits_ms / 1000.0)
        memory = col.get(memory_id)
        check_visible(self.config, collection, self.agent, memory, memory_id)
        return memory

    def get_many(self, collection: str, memory_ids: list[str]) -> list[Memory]:
        """The live memories of those ids the agent may see, in the given order."""
        col = self._memories.collection(collection)
        heads = col.memories
        return col.get_many([i for i in memory_ids if i in heads and visible_to(self.config, collection,
                                                                                  self.agent, heads[i])])

    def lifecycle_of(self, collection: str, memory_id: str) -> dict:
        """Collection.lifecycle_of, of a memory the agent may see."""
        return self._visible(collection, memory_id).lifecycle_of(memory_id)

    def may_ask(self, collection: str, filters: Filters) -> bool:
        """False when `filters` name another author in a private collection (nothing the agent may see matches)."""
        return own_filters(self.config, collection, self.agent, filters) is not None

    def search(self, collection: str, query: str, *, filters: Filters, record: bool = False, **options) -> list[Hit]:
        """Collection.search within what the agent may see; empty when `filters` ask for another author's entries
        of a private collection, or the collection does not exist. `record`: the hits count as retrieved by the
        agent (a person browsing a panel is not counted)."""
        narrowed = own_filters(self.config, collection, self.agent, filters)
        if narrowed is None or not self.exists(collection):
            return []
        col = self._memories.collection(collection)
        hits = col.search(query, filters=narrowed, **options)
        if record:
            self.record_retrievals(collection, [hit.memory.id for hit in hits])
        return hits

    def record_retrievals(self, collection: str, ids: list[str]) -> None:
        """What the agent was shown counts as retrieved (best-effort statistics, never logged); its own
        memories' rank is not raised by its own searches."""
        if self.exists(collection):
            self._memories.collection(collection).record_retrievals(ids, by=self.agent)

    def unembedded_count(self, collection: str) -> int:
        """Memories stored moments ago and not yet searchable by meaning: in a private collection only the agent's
        own (the others' would say how much they are writing)."""
        if not self.exists(collection):
            return 0
        col = self._memories.collection(collection)
        return col.unembedded_count(self.agent if self.private(collection) else None)

    def matching(self, collection: str, filters: Filters | None = None) -> list[Head]:
        """Heads of the live memories passing `filters` that the agent may see, in no particular order."""
        narrowed = own_filters(self.config, collection, self.agent, filters or Filters())
        if narrowed is None:
            return []
        return self._memories.collection(collection).matching(narrowed)

    def visible_heads(self, collection: str) -> list[Head]:
        """Every live head of `collection` the agent may see."""
        col = self._memories.collection(collection)
        if self.private(collection):
            return col.matching(Filters(author=self.agent))
        with col.lock.gen_rlock():
            return list(col.memories.values())

    def stats(self, collection: str, project: str | None = None) -> tuple[dict, list[Head]]:
        """(counts, the heads counted): in a private collection of the agent's own entries only (and no log size:
        that counts everyone's; of those waiting for the embedder, its own)."""
        col = self._memories.collection(collection)
        if self.private(collection):
            heads = col.matching(Filters(author=self.agent, project=project))
            waiting = col.rows.unembedded
            return {"collection": collection, **summarize(heads), "private": True,
                    "not_embedded_yet": sum(head.id in waiting for head in heads)}, heads
        heads = col.matching(Filters(project=project)) if project else self.visible_heads(collection)
        return col.stats(project), heads

    def names_in_use(self, collection: str) -> dict[str, set[str]]:
        """The projects, types, authors and tags of the memories the agent may see (for "did you mean" hints)."""
        if not self.private(collection):
            return self._memories.collection(collection).names_in_use()
        used = {"project": set(), "memory_type": set(), "author": set(), "tag": set()}
        for m in self.matching(collection, Filters(author=self.agent)):
            used["project"].add(m.project)
            used["memory_type"].add(m.type)
            used["author"].add(m.author)
            used["tag"].update(m.tags)
        return used

    def due(self, collection: str, now: float) -> tuple[list[Head], list[Head]]:
        """(due for review, expired) among the memories the agent may see (Collection.due)."""
        col = self._memories.collection(collection)
        review, gone = col.due(now)
        if self.private(collection):
            review, gone = [h for h in review if h.author == self.agent], [h for h in gone if h.author == self.agent]
        return review, gone

    def links(self, collection: str, now: float) -> LifecycleLinks:
        """The collection's supersession and consolidation links, for marking results (ids only)."""
        rows = self._memories.collection(collection).rows
        return LifecycleLinks(rows.successor_of, rows.consolidated_into, now)

    def lifecycle_counts(self, collection: str, heads: list[Head], now: float) -> dict:
        """How many of `heads` are superseded, consolidated, expired, or due for review at `now`."""
        rows = self._memories.collection(collection).rows
        counts = {"superseded": 0, "consolidated": 0, "expired": 0, "review_due": 0}
        for head in heads:
            counts["superseded"] += head.id in rows.successor_of
            counts["consolidated"] += head.id in rows.consolidated_into
            counts["expired"] += expired(head.valid_until, now)
            counts["review_due"] += review_due(head.review_after, now)
        return counts

    # -- what a session starts with ---------------------------------------------------------------------------
    def pinned(self, collection: str, *, current_only: bool = False, now: float | None = None) -> list[Memory]:
        """The agent's own identity and directive entries (never another agent's), most recently updated first;
        `current_only`: neither superseded nor expired."""
        col = self._memories.collection(collection)
        return col.recent(types=BOOTSTRAP_TYPES, limit=50,
                          predicate=lambda m: pinned_for(self.agent, m) and (not current_only
                                                                             or col.is_current(m, now)))

    def replacement_of(self, collection: str, memory: Memory, now: float) -> Memory | None:
        """The later memory that restates `memory` (lifecycle/restatement.py), when the agent may see it and it
        still holds; None otherwise."""
        col = self._memories.collection(collection)
        later = col.replacement_of(memory.id)
        if later is None or not visible_to(self.config, collection, self.agent, later) or not col.is_current(
                col.memories.get(later.id) or later, now):
            return None
        return later

    def handoffs(self, collection: str, project: str, *, limit: int, current_only: bool,
                 now: float) -> list[Memory]:
        """The latest handoffs of `project` the agent may see: never an expired one; `current_only`: not a
        superseded one either."""
        col = self._memories.collection(collection)

        def shown(m) -> bool:
            if not visible_to(self.config, collection, self.agent, m):
                return False
            return col.is_current(m, now) if current_only else not expired(m.valid_until, now)

        return col.recent(types={"handoff"}, project=project, limit=limit, predicate=shown)

    def typed(self, collection: str, types: set[str], project: str, *, limit: int, now: float) -> list[Memory]:
        """The latest memories of `types` in `project` that the agent may see and that still hold (neither
        superseded nor expired), most recently updated first."""
        col = self._memories.collection(collection)
        return col.recent(types=types, project=project, limit=limit,
                          predicate=lambda m: visible_to(self.config, collection, self.agent, m)
                          and col.is_current(m, now))

    def own_bootstrap_entry(self, collection: str, entry_id: str, entry_type: str) -> Head | None:
        """The head of bootstrap entry `entry_id` if it exists and is the agent's own; None when it is free (the
        collection is made when new). Another agent's is refused, naming a free id like `<agent>-<entry_type>`."""
        heads = self._memories.collection(collection, create=True).memories
        existing = heads.get(entry_id)
        if existing is not None:
            check_bootstrap_owner(existing, self.agent, self._free_id(heads, f"{self.agent}-{entry_type}"))
        return existing

    def _free_id(self, heads: dict, base: str) -> str:
        """`base`, or `base-2`, `base-3`...: the first that is free or already the agent's own."""
        for n in range(1, 1000):
            candidate = base if n == 1 else f"{base}-{n}"
            if candidate not in heads or heads[candidate].author == self.agent:
                return candidate
        return f"{base}-{new_id()}"

    # -- the lifecycle ----------------------------------------------------------------------------------------
    def consolidate(self, collection: str, *, project: str | None, dry_run: bool, now: float):
        """Consolidate the agent's own mature clusters (lifecycle/consolidation.py); never in a private
        collection."""
        return consolidate(self._memories.collection(collection), self.config, author=self.agent, project=project,
                           dry_run=dry_run, now=now)

    def author_of(self, collection: str, memory_id: str) -> str | None:
        """Who holds id `memory_id` in `collection` (made when new), whoever it is: the sessions indexing leaves out
        a turn whose id another author's memory holds, and says so in the server log (never to an agent)."""
        head = self._memories.collection(collection, create=True).memories.get(memory_id)
        return None if head is None else head.author

    def consolidation_preview(self, collection: str, *, now: float):
        """What a consolidation of every author's memories would gather now (dry run: nothing is written); the
        dashboard's Lifecycle panel, not for a private collection (session turns are never consolidated)."""
        return consolidate(self._memories.collection(collection), self.config, author=None, dry_run=True, now=now)

    def _visible(self, collection: str, memory_id: str):
        col = self._memories.collection(collection)
        check_visible(self.config, collection, self.agent, col.memories.get(memory_id), memory_id)
        return col
