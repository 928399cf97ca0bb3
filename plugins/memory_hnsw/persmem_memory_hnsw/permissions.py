"""Who may see and change a memory: its author, or an agent that `[memory] editors` grants over that author;
in a private collection (`[memory] private_collections`), only its author.

Identity and directive entries are what chorus_init pins into their author's sessions as the agent's own
voice, so only their author changes them, whatever the grants: an editor could otherwise put words in
another agent's mouth. An operator who must fix one asks that agent, or connects as it.
"""

from __future__ import annotations

import dataclasses

from persmem_core.sdk import UserError

from .store.query import Filters
from .store.records import Head

BOOTSTRAP_TYPES = frozenset({"identity", "directive"})


def may_edit(editors: dict[str, list[str]], editor: str, author: str) -> bool:
    """Whether `editor` may change memories `author` wrote (grants only: bootstrap entries are checked apart)."""
    if editor == author:
        return True
    granted = editors.get(editor, [])
    return "*" in granted or author in granted


def check_change(editors: dict[str, list[str]], editor: str, memory: Head, action: str,
                 new_type: str | None = None) -> None:
    """Refuse `editor`'s `action` ("update", "delete") on `memory` unless it is theirs or granted; `new_type`
    is the type an update gives it (turning someone's note into an identity entry is changing one)."""
    author = memory.author
    if editor == author:
        return
    if memory.type in BOOTSTRAP_TYPES or new_type in BOOTSTRAP_TYPES:
        raise UserError(f"memory {memory.id!r} was written by {author!r}; you are {editor!r}. Identity and directive "
                        f"entries are pinned into their author's sessions, so only {author!r} can {action} them or "
                        "make them; no [memory] editors grant covers them. Send the author a message, or store "
                        "your own memory instead.")
    if not may_edit(editors, editor, author):
        raise UserError(f"memory {memory.id!r} was written by {author!r}; you are {editor!r} and may {action} only "
                        "memories you wrote. Ask its author, or have the operator grant it in persmem.toml: "
                        f"[memory] editors = {{{editor} = [\"{author}\"]}}.")


def check_bootstrap_owner(memory: Head, agent: str, suggestion: str) -> None:
    """bootstrap_update overwrites only the caller's own entries, whatever the grants."""
    if memory.author != agent:
        raise UserError(f"entry {memory.id!r} was written by {memory.author!r}; bootstrap_update changes only your own "
                        f"entries. Pick another entry_id, e.g. \"{suggestion}\".")


def pinned_for(agent: str, memory: Head) -> bool:
    """Whether chorus_init pins this bootstrap entry into `agent`'s session: only the agent's own. No grant and
    no tag lets one agent put an identity or directive into another's session."""
    return memory.author == agent


# -- private collections: each agent sees and changes only its own entries -----------------------------------
# Session transcripts are what one agent was told and said; no other agent reads them, and no editors grant
# reaches into them. Another agent's entry is answered like a missing one: its id, author and existence stay
# hidden too.

def is_private(config, collection: str) -> bool:
    return collection in config.private_collections


def visible_to(config, collection: str, agent: str, memory: Head) -> bool:
    """Whether `agent` may see (and, with a grant, change) `memory` of `collection`."""
    return memory.author == agent or not is_private(config, collection)


def no_such_memory(memory_id: str, collection: str) -> UserError:
    """What a caller is told about an id it may not see: the same as for an id that does not exist."""
    return UserError(f"no memory {memory_id!r} in collection {collection!r}; memory_search finds ids.")


def check_visible(config, collection: str, agent: str, memory: Head | None, memory_id: str) -> None:
    if memory is None or not visible_to(config, collection, agent, memory):
        raise no_such_memory(memory_id, collection)


def editors_in(config, collection: str) -> dict[str, list[str]]:
    """The editors grants that apply in `collection`: none in a private one."""
    return {} if is_private(config, collection) else config.editors


def own_filters(config, collection: str, agent: str, filters: Filters) -> Filters | None:
    """`filters` narrowed to `agent`'s own entries when `collection` is private; None when they ask for another
    author's entries there (nothing the caller may see matches)."""
    if not is_private(config, collection):
        return filters
    if filters.author not in (None, agent):
        return None
    return dataclasses.replace(filters, author=agent)
