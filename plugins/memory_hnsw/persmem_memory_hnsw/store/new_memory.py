"""What a store is given (`NewMemory`), and the checks every new text passes before anything is written."""

from __future__ import annotations

from dataclasses import dataclass, field

from persmem_core.sdk import UserError

from ..config import MemoryConfig
from .contexts import MAX_CONTEXT_CHARS, MAX_QUESTION_CHARS
from .records import ID_RE


@dataclass
class NewMemory:
    content: str
    project: str
    type: str
    tags: list[str]
    memory_id: str | None = None
    author: str | None = None  # imports keep the original author and time
    created: float | None = None
    context: str = ""  # text around it (contexts.neighbour_contexts), indexed for keyword search only
    reply_to: str = ""  # the question before it (contexts.questions_before), indexed for keyword search only
    supersedes: list[str] = field(default_factory=list)  # older memories it replaces (checked: see store)
    consolidates: list[str] = field(default_factory=list)  # a consolidated memory's members (write_consolidated)
    valid_until: float = 0.0  # expires after this timestamp; 0: never
    review_after: float = 0.0  # due for review after this timestamp; 0: never
    detect_supersession: bool = False  # look for an older memory it restates (memory_store of one memory)
    show_replaced: bool = False  # embed it before the store returns, and name what it may restate (may_replace)
    editor: str | None = None  # who made it, if not its author (the consolidation job)


def check_content(config: MemoryConfig, content: str) -> None:
    if not content.strip():
        raise UserError("content is empty; store some text.")
    if len(content) > config.max_content_chars:
        raise UserError(
            f"content is {len(content)} characters; the limit is {config.max_content_chars} "
            "([memory] max_content_chars). Split it into several memories (memory_bulk_store)."
        )


def check_new(config: MemoryConfig, item: NewMemory) -> None:
    check_content(config, item.content)
    if len(item.context) > MAX_CONTEXT_CHARS:
        raise UserError(f"context is {len(item.context)} characters; at most {MAX_CONTEXT_CHARS}.")
    if len(item.reply_to) > MAX_QUESTION_CHARS:
        raise UserError(f"reply_to is {len(item.reply_to)} characters; at most {MAX_QUESTION_CHARS}.")
    if item.memory_id is not None and not ID_RE.match(item.memory_id):
        raise UserError(f"invalid memory id {item.memory_id!r}: 1-128 letters, digits, '_', ':', '.', '-'.")
