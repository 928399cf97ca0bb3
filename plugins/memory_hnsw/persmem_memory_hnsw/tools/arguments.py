"""What the memory tools check in their arguments before anything is read or written: ids, dates, and the ids a
caller may not choose."""

from __future__ import annotations

from persmem_core.sdk import CallContext, UserError

from ..access import AgentMemory
from ..service import service
from ..store.query import parse_when, shown
from ..store.records import ID_RE

Tags = str | list[str]  # tags as a tool takes them: "a,b" or ["a", "b"] (store.query.parse_tags reads both)
MAX_LINKED_IDS = 20  # ids one memory_store may name in supersedes
# Consolidated memories get the id "con_" + their first member's id (lifecycle/candidates.consolidated_id), which anyone
# can compute: a caller-chosen id with that prefix could take the id of another agent's consolidated memory.
CONSOLIDATED_ID_PREFIX = "con_"


def caller_memory(call: CallContext) -> AgentMemory:
    """The memory store as the calling agent may read and change it (access.py applies the permission rules)."""
    return service(call.host).as_agent(call.agent)


def parse_ids(value: str | list[str] | None, what: str) -> list[str]:
    """Memory ids given as "id1,id2" or a list, stripped, without repeats; each must be a well-formed id."""
    if value is None:
        return []
    if not isinstance(value, (str, list)) or not all(isinstance(item, str) for item in value):
        raise UserError(f"{what} must be memory ids, comma-separated (\"id1,id2\") or a list of strings.")
    items = value.split(",") if isinstance(value, str) else value
    ids = list(dict.fromkeys(item.strip() for item in items if item.strip()))
    if len(ids) > MAX_LINKED_IDS:
        raise UserError(f"{what} names {len(ids)} memories; at most {MAX_LINKED_IDS} in one call.")
    for memory_id in ids:
        if not ID_RE.match(memory_id):
            raise UserError(f"{what}: {shown(memory_id)} is not a memory id (1-128 letters, digits, '_', ':', '.', "
                            "'-'); memory_search finds ids.")
    return ids


def parse_date(value: str | None, what: str, *, clearable: bool = False) -> float | None:
    """A valid_until / review_after as a timestamp: None when not given; with `clearable` (memory_update),
    "none" clears it (0.0). A date alone means the end of that day (valid_until=2026-12-31 is valid all
    that day)."""
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise UserError(f"{what} must be an ISO date or time as a string, like \"2026-12-31\".")
    if value.strip().casefold() == "none":
        if clearable:
            return 0.0
        raise UserError(f"{what}=\"none\" only clears a date in memory_update; here leave {what} empty for no date.")
    return parse_when(value.strip(), what, through_day=True)


def check_id_allowed(memory: AgentMemory, collection: str, field: str) -> None:
    """Refuse an id the caller chose in a private collection. There another agent's entries are invisible, so
    an id of theirs could neither be reported as taken (that would tell their turns exist: session turn ids
    can be computed) nor taken by the caller (their indexing would then skip that turn). The refusal is the
    same whether the id is taken or not."""
    if memory.private(collection):
        raise UserError(f"{field} cannot be chosen in collection {collection!r}: ids in a private collection are "
                        f"given by the server. Leave {field} empty; the reply names the id stored.")


def check_not_reserved(memory_id: str, field: str) -> None:
    """Refuse a chosen id that only the consolidation gives (CONSOLIDATED_ID_PREFIX)."""
    if memory_id.startswith(CONSOLIDATED_ID_PREFIX):
        raise UserError(f"{field} {shown(memory_id)} starts with {CONSOLIDATED_ID_PREFIX!r}, which is reserved for "
                        "consolidated memories (memory_consolidate names them). Choose an id without that prefix, "
                        f"or leave {field} empty and the server gives one.")
