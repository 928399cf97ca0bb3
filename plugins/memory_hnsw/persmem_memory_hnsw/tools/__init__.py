"""The memory tools, with persMEM's names, argument names and defaults (plus a few more). Results are JSON
objects. The author of a memory is always the calling agent (from its credentials), never an argument; every
tool reads and writes through the caller's door (access.py), which applies the permission rules.

- `arguments.py`      checks of ids and dates, the ids a caller may not choose, the caller's door
- `storing.py`        memory_store, memory_bulk_store
- `searching.py`      memory_search
- `changing.py`       one memory by id: memory_get, memory_update, memory_delete, memory_validate, memory_unlink
- `overview.py`       a collection as a whole: memory_consolidate, memory_stats, memory_list_collections
- `session_start.py`  chorus_init, bootstrap_update
"""

from .changing import memory_delete, memory_get, memory_unlink, memory_update, memory_validate
from .overview import memory_consolidate, memory_list_collections, memory_stats
from .searching import memory_search
from .session_start import bootstrap_update, chorus_init
from .storing import memory_bulk_store, memory_store

ALL_TOOLS = [memory_store, memory_bulk_store, memory_search, memory_get, memory_update, memory_delete,
             memory_validate, memory_unlink, memory_consolidate, memory_stats, memory_list_collections, chorus_init,
             bootstrap_update]
# The Chorus extension's session start is a tool set of its own (opt-in): `persmem agent tools NAME --add chorus`.
CHORUS_SET = "chorus"
CHORUS_TOOLS = (chorus_init, bootstrap_update)
# A collection's overview and upkeep, rarely needed in a session (the idle job consolidates by itself): opt-in, so
# the default sets stay within their token budget. `persmem agent tools NAME --add curation`.
CURATION_SET = "curation"
CURATION_TOOLS = (memory_consolidate, memory_stats, memory_list_collections)


def tool_set_of(tool) -> str:
    """The tool set a memory tool is registered in: chorus, curation, or memory."""
    return CHORUS_SET if tool in CHORUS_TOOLS else CURATION_SET if tool in CURATION_TOOLS else "memory"
