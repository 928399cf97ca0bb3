"""persmem: a minimal pluggy host that serves its plugins' tools over MCP.

A plugin imports `persmem_core.sdk` (its tests `persmem_core.sdk.testing`) and nothing else of the core; these
four names stay here for plugins written before the SDK. Cheap to import: no MCP, no web framework.

The rooms (a folder's `__init__` lists its own modules):
- `host.py`            the host: plugins, config, data folders and agents, without any server
- `plugins.py`         finding, loading and listing plugins; calling a hook plugin by plugin (`call_each`)
- `hookspecs.py`       the hooks the host calls (the whole contract with plugins)
- `builtin.py`         the core's own plugin (persmem_whoami, the core's config sections and doctor lines)
- `state.py`           where plugins keep what they open at startup (`host.state`)
- `context.py`         what a tool call knows about who called it (`CallContext`)
- `config.py`          one TOML file, one validated config; `settings.py` the sections' base class and the
                       core's own sections; `config_reference.py` docs/configuration.md's tables, from the code
- `doctor.py`          `persmem doctor`'s runner; `checks.py` the `Check` a doctor hook returns
- `errors.py`          errors a user can fix (the message carries the fix)
- `paths.py`           where persmem keeps its config and data; `fileio.py` durable file writes
- `text.py`            text as persmem stores and shows it; `timefmt.py` times as people read them
- `invocation.py`      the `persmem` command line a user can type, for the next steps the CLI prints
- `sdk/`               everything a plugin may import
- `testing.py`         the pytest fixtures (a pytest plugin)
- `__main__.py`        `python -m persmem_core`, the same as the `persmem` command
- `transport/`         MCP over HTTP and stdio, the owner's local socket, plugin functions as MCP tools
- `auth/`              agents and credentials, the HTTP auth middleware, OAuth 2.1
- `cluster/`           several nodes on one NATS JetStream cluster; local clusters for tests
- `sandbox/`           child processes for tools and the OS sandbox around them
- `crypto/`            encryption at rest: the home's key, sealing
- `net/`               outgoing fetches that cannot reach private addresses; bind addresses
- `cli/`               the `persmem` command
- `plugin_template/`   what `persmem plugin new` writes
"""

from persmem_core.context import CallContext
from persmem_core.errors import UserError
from persmem_core.hookspecs import hookimpl
from persmem_core.settings import ConfigSection

__version__ = "0.1.0"

__all__ = ["CallContext", "ConfigSection", "UserError", "__version__", "hookimpl"]
