"""Writing a consolidated memory: its extractive text, its tags, and the one log append that stores it (or its
description, in a dry run).

Content: a first line naming how many memories, the project and the dates, then one line per member's
representative statement (its first sentence, or its start cut at a word), the most central member first
(highest mean similarity to the others), each text (and first sentence) once, until `consolidate_max_chars`.
Tags: the members' tags by frequency. Id: "con_" + the leader's id (candidates.consolidated_id), so a re-run
finds it again. Every cluster is ONE `Collection.write_consolidated` call (one log append): a kill -9 mid-run
leaves whole consolidated memories only, each listing members that exist. Members are not touched.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ..search.weighing import CONSOLIDATED_TYPE
from ..store.new_memory import NewMemory
from .candidates import Group, memory_vector

log = logging.getLogger("persmem.memory.consolidate")

CONSOLIDATION_EDITOR = "persmem-consolidation"  # the editor of every consolidated memory's versions
STATEMENT_CHARS = 300  # a representative statement is a member's first sentence, or its start cut near this
MAX_TAGS = 20
PREVIEW_CHARS = 300
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=\S)")


@dataclass
class Cluster:
    id: str  # the consolidated memory's id ("con_" + its leader's id)
    project: str
    author: str
    members: list[str]  # every member id (for "grow": the existing ones and the new ones)
    action: str  # "create" | "grow" | "unchanged"
    preview: str  # the start of the consolidated memory's text
    new_members: list[str] = field(default_factory=list)  # the members this run adds ("create": all of them)

    def to_dict(self) -> dict:
        return {"id": self.id, "action": self.action, "project": self.project, "author": self.author,
                "members": self.members, "new_members": self.new_members, "preview": self.preview}


def representative_statement(content: str) -> str:
    """A member's first sentence, or its start cut at a word near STATEMENT_CHARS; on one line."""
    text = " ".join(content.split())
    first = SENTENCE_END.split(text, maxsplit=1)[0]
    if len(first) <= STATEMENT_CHARS:
        return first
    cut = first[:STATEMENT_CHARS].rsplit(" ", 1)[0]
    return (cut if len(cut) >= STATEMENT_CHARS // 2 else first[:STATEMENT_CHARS]) + " …"


def consolidated_text(memories: list, vectors: np.ndarray, project: str, max_chars: int) -> str:
    """The extractive text of a consolidated memory of `memories` (Memory records, `vectors` their unit memory
    vectors in the same order): a first line, then the representative statements, most central first."""
    dates = [time.strftime("%Y-%m-%d", time.gmtime(m.created)) for m in memories]
    lines = [f"Consolidated from {len(memories)} memories of project {project}, {min(dates)} to {max(dates)}:"]
    if len(memories) > 1:
        sims = vectors @ vectors.T
        centrality = (sims.sum(axis=1) - np.diag(sims)) / (len(memories) - 1)
    else:
        centrality = np.ones(1, dtype=np.float32)
    order = sorted(range(len(memories)), key=lambda i: (-round(float(centrality[i]), 6), memories[i].created,
                                                        memories[i].id))
    seen, used, left_out = set(), len(lines[0]), 0
    reserve = 40  # room for the closing "… and N more" line
    for i in order:
        memory = memories[i]
        statement = representative_statement(memory.content)
        keys = {memory.content_hash or memory.content, statement.casefold()}
        if keys & seen:  # the same text, or the same first sentence: once
            continue
        seen |= keys
        line = "- " + statement
        if used + 1 + len(line) > max_chars - reserve:
            left_out += 1
            continue
        lines.append(line)
        used += 1 + len(line)
    if left_out:
        lines.append(f"- … and {left_out} more (memory_get lists every member)")
    return "\n".join(lines)


def merged_tags(memories: list) -> list[str]:
    counts = Counter(tag for m in memories for tag in dict.fromkeys(m.tags))
    return [tag for tag, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))][:MAX_TAGS]


def write_cluster(col, config, group: Group, action: str, con_id: str, positions: list[int], new: list[int], *,
                  dry_run: bool, now: float) -> Cluster | None:
    """Write one consolidated memory (one log append), or describe it when `dry_run`. None when it cannot be
    written (its id is taken by another kind of memory, or its members are gone)."""
    new_ids = [group.ids[p] for p in new]
    if action == "grow":
        existing = next(members for cid, members, _ in group.consolidated if cid == con_id)
        member_ids = [*existing, *new_ids]
    else:
        member_ids = new_ids
    memories = col.get_many(member_ids)  # the live ones, in order
    if not memories:
        return None
    if action == "create":
        taken = col.memories.get(con_id)
        if taken is not None:  # someone stored a memory under that id: never overwrite it
            log.warning("collection %s: not consolidating under %s: that id is taken by a %s memory",
                        col.name, con_id, taken.type)
            return None
    position_of = {memory_id: p for p, memory_id in enumerate(group.ids)}
    vectors = np.vstack([group.vectors[position_of[m.id]] if m.id in position_of else memory_vector(col, m.id)
                         for m in memories])
    content = consolidated_text(memories, vectors, group.project, config.consolidate_max_chars)
    member_ids = [m.id for m in memories]
    cluster = Cluster(id=con_id, project=group.project, author=group.author, members=member_ids, action=action,
                      preview=content[:PREVIEW_CHARS], new_members=[m for m in new_ids if m in set(member_ids)])
    if dry_run:
        return cluster
    item = NewMemory(content=content, project=group.project, type=CONSOLIDATED_TYPE, tags=merged_tags(memories),
                     memory_id=con_id, author=group.author, consolidates=member_ids, editor=CONSOLIDATION_EDITOR)
    col.write_consolidated(item, author=group.author)
    return cluster
