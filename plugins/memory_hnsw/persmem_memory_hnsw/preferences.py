"""A user's standing preferences: how they like things done ("Alex prefers pytest with -x"). Every session of the
project starts with them in its briefing, and a prompt that leans on them ("run the tests with the flags I like")
gets them recalled. Recall by meaning alone cannot do that: the prompt and the preference share almost nothing in
meaning (cosine 0.12 with the default model, far under `[memory] recall_min_similarity`), so a prompt that
refers to the user's own likes brings the project's preferences whatever their similarity.

A preference is a memory of type `preference`, or one whose text says one (SAYS_PREFERENCE: "prefers", "likes
to", "always use", ...), found among the project's memories by those words. The project's own come first, then
those of the project "general" (where a memory without a project goes). Only memories that still hold: neither
superseded nor expired.
"""

from __future__ import annotations

import re

from .access import AgentMemory
from .permissions import BOOTSTRAP_TYPES
from .store.query import Filters
from .store.records import Memory

PREFERENCE_TYPES = frozenset({"preference"})
GENERAL_PROJECT = "general"
# The words a preference is said with, searched for (keywords) among a project's memories.
PREFERENCE_WORDS = "prefer prefers preferred preference likes always never favourite favorite"
SAYS_PREFERENCE = re.compile(
    r"\b(prefer(s|red|ence)?|likes? (to|it|using|when)|(always|never) (use|run|write|put|add|do|call|keep)|"
    r"favou?rite)\b", re.IGNORECASE)
# A prompt that refers to the user's own likes or habits.
ASKS_PREFERENCE = re.compile(
    r"\b(I|I'd|I've)\s+(like|prefer|want|usually|always|normally|use)\b|"
    r"\bmy (usual|preferred|favou?rite|preferences?|style|way|flags|settings|conventions?|defaults?)\b|"
    r"\b(the way|how) I (like|want|prefer|do)\b|\bas (usual|always)\b", re.IGNORECASE)


def asks_for_preferences(prompt: str) -> bool:
    """Does `prompt` lean on the user's own likes ("the flags I like", "my usual style", "as usual")?"""
    return bool(ASKS_PREFERENCE.search(prompt[:4000]))


def standing_preferences(memory: AgentMemory, collection: str, project: str, *, limit: int,
                         now: float) -> list[Memory]:
    """Up to `limit` preferences the agent may see: `project`'s first, then the general ones; typed ones
    before those found by their words, most recently updated first."""
    found: dict[str, Memory] = {}
    for name in dict.fromkeys(p for p in (project, GENERAL_PROJECT) if p):
        for m in memory.typed(collection, PREFERENCE_TYPES, name, limit=limit, now=now):
            found.setdefault(m.id, m)
        # keywords only: the words are what SAYS_PREFERENCE checks, and embedding this fixed query at every
        # session start would cost a model run (and a wait for unembedded stores) for nothing
        hits = memory.search(collection, PREFERENCE_WORDS, top_k=limit * 3, filters=Filters(project=name),
                             mode="lexical", include_superseded=False, include_expired=False)
        for hit in hits:
            m = hit.memory
            if m.type not in BOOTSTRAP_TYPES | {"handoff"} and SAYS_PREFERENCE.search(m.content[:400]):
                found.setdefault(m.id, m)
        if len(found) >= limit:
            break
    return list(found.values())[:limit]
