"""Who may change a memory: its author, or an agent that `[memory] editors` grants over that author.

Identity and directive entries are what chorus_init pins into their author's sessions as the agent's own
voice, so only their author changes them, whatever the grants: an editor could otherwise put words in
another agent's mouth. An operator who must fix one asks that agent, or connects as it.
"""

from __future__ import annotations

from persmem_core import UserError

from .records import Head

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
