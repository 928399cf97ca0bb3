"""The persmem SDK: everything a plugin may import from the core, in one place.

A plugin imports `persmem_core.sdk` and nothing else of persmem (its tests may add `persmem_core.sdk.testing`);
`tests/test_plugin_independence.py` fails a plugin that reaches past it. The core may move its modules around;
the names below stay. docs/plugins.md documents each group, and its hook reference is checked against
`persmem_core/hookspecs.py`.

    from persmem_core.sdk import CallContext, ConfigSection, UserError, hookimpl

Importing this module costs nothing: each name loads its core module on first use (PEP 562), so a plugin that
imports `get_host` inside a CLI command, or `NatsLink` inside `startup`, pays for them only there. Import heavy
names (`NatsLink`, `Resolver`, `stopping_server`) inside the functions that use them, as you would the libraries.

- `testing.py`  what a plugin's tests may import besides this module: real servers, hosts, clusters, browsers

The groups (the core room that holds each today is in `_group` below):
- hooks and registration: `hookimpl`, `hookspec` (declare hooks other plugins answer), `CallContext`,
  `agent_of_scope`, `ConfigSection`, `UserError`, `PluginConflictError`, `NotReady`, `PerPlugin`, `call_each`,
  `get_host` (the Host of a CLI command)
- what a session starts with: `BriefingSection`, `session_start_sections` (the `briefing_sections` answers,
  gathered)
- health: `pass_`, `warn`, `fail`, `run_doctor`
- agents: `AgentStore`, `NAME_RE`
- durable files: `atomic_write_bytes`, `atomic_write_at`, `create_private`, `open_private`, `fsync_dir`,
  `sha256_file`, `HashingReader`, `write_all`
- encryption at rest: `Sealer`, `SealingError`, `KeyNotOnHand`, `ResealReport`, `is_sealed`, `sealed_key_id`,
  `missing_key_message`, `scratch_file`, `SEALED_MAGIC`, `HEADER_BYTES`
- text that reaches a prompt: `prompt_line`, `printable`, `valid_text`, `control_characters`
- child processes: `run_capped`, `Finished`, `SAFE_PATH`, `bubblewrap` (the OS sandbox, a module: `Confinement`,
  `Limits`, `run`, `support`...), `WORKSPACE` (the workspace lock: commands shared, git exclusive)
- the network: `Guard`, `Target`, `networks_from`, `refusal` (refusing private addresses), `Resolver`,
  `MAX_HUNG_LOOKUPS`
- the cluster: `NatsLink`, `StreamBinding`, `ClusterRefused`, `FrameRefused`, `bound_purpose`, `stream_problems`
- the local server: `socket_path`, `OwnerCard`, `served_agent`, `owner_card`, `holding_home`, `stopping_server`
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> (core module, attribute in it; None for the module itself)
_NAMES: dict[str, tuple[str, str | None]] = {}


def _group(module: str, *names: str) -> None:
    for name in names:
        _NAMES[name] = (f"persmem_core.{module}", name)


_group("hookspecs", "hookimpl", "hookspec", "BriefingSection")
_group("session_start", "session_start_sections")
_group("context", "CallContext")
_group("auth.scope", "agent_of_scope")
_group("settings", "ConfigSection")
_group("errors", "UserError", "PluginConflictError")
_group("state", "NotReady")
_group("plugins", "PerPlugin", "call_each")
_group("cli.main", "get_host")
_group("checks", "pass_", "warn", "fail")
_group("doctor", "run_doctor")
_group("auth.agents", "AgentStore", "NAME_RE")
_group("fileio", "atomic_write_bytes", "atomic_write_at", "create_private", "open_private", "fsync_dir",
       "sha256_file", "HashingReader", "write_all")
_group("crypto.sealing", "Sealer", "SealingError", "KeyNotOnHand", "ResealReport", "is_sealed", "sealed_key_id",
       "missing_key_message", "scratch_file", "SEALED_MAGIC", "HEADER_BYTES")
_group("text", "prompt_line", "printable", "valid_text", "control_characters")
_group("sandbox.children", "run_capped", "Finished", "SAFE_PATH")
_group("sandbox.workspace_lock", "WORKSPACE")
_group("net.guard", "Guard", "Target", "networks_from", "refusal")
_group("net.resolver", "Resolver", "MAX_HUNG_LOOKUPS")
_group("cluster.nats_link", "NatsLink", "StreamBinding", "ClusterRefused", "FrameRefused", "bound_purpose")
_group("cluster.nats_doctor", "stream_problems")
_group("paths", "socket_path")
_group("transport.owner_card", "OwnerCard")
_group("transport.local_server", "served_agent")
_group("transport.takeover", "owner_card", "holding_home")
_group("transport.server", "stopping_server")
_NAMES["bubblewrap"] = ("persmem_core.sandbox.bubblewrap", None)

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    try:
        module, attribute = _NAMES[name]
    except KeyError:
        raise AttributeError(f"persmem_core.sdk has no {name!r}: a plugin may use only the names in "
                             f"persmem_core.sdk.__all__ (see docs/plugins.md)") from None
    value = importlib.import_module(module)
    if attribute is not None:
        value = getattr(value, attribute)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return __all__
