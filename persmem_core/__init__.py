"""persmem: a minimal pluggy host that serves its plugins' tools over MCP.

A plugin imports `persmem_core.sdk` (its tests `persmem_core.sdk.testing`) and nothing else of the core; these
four names stay here for plugins written before the SDK. Cheap to import: no MCP, no web framework.

Where everything lives, room by room, and where a change goes: docs/architecture.md.
"""

from persmem_core.context import CallContext
from persmem_core.errors import UserError
from persmem_core.hookspecs import hookimpl
from persmem_core.settings import ConfigSection

__version__ = "0.1.0"

__all__ = ["CallContext", "ConfigSection", "UserError", "__version__", "hookimpl"]
