"""persmem: a minimal pluggy host that serves its plugins' tools over MCP.

This module is the plugin author's surface. It stays cheap to import: no
MCP, no web framework, nothing heavy.

    from persmem_core import hookimpl, CallContext, ConfigSection, UserError
"""

from persmem_core.context import CallContext
from persmem_core.errors import UserError
from persmem_core.hookspecs import hookimpl
from persmem_core.settings import ConfigSection

__version__ = "0.1.0"

__all__ = ["CallContext", "ConfigSection", "UserError", "__version__", "hookimpl"]
