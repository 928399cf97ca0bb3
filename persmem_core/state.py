"""Where plugins keep what they open at startup: `host.state`, one entry per plugin, by plugin name.

The rule every plugin follows (docs/plugins.md, "Plugin state"):

- `startup(host)` opens the plugin's service (a store, a model, a connection) and puts it here:
  `host.state.put("amq_maildir", store)`; `shutdown(host)` takes it out (`host.state.pop(...)`) and closes it.
- Entry points (tools, panels, routes) get it with `host.state.get("amq_maildir")`. Before startup has run, or
  after shutdown, that is a `NotReady` error (a UserError the caller sees as "not ready: try again"), never a
  second service opened on the side. A service that finishes loading in the background answers "still
  loading" itself.
- CLI commands run without a server: they open their own service for the length of the command.

No module globals keyed by `id(host)`: several hosts (tests, the CLI beside a server) never share state.
"""

from __future__ import annotations

import threading
from typing import Any

from persmem_core.errors import UserError


class NotReady(UserError):
    """A plugin's service was asked for before its startup ran (or after its shutdown)."""


class PluginState:
    def __init__(self) -> None:
        self._services: dict[str, Any] = {}
        self._lock = threading.Lock()

    def put(self, plugin: str, service: Any) -> None:
        with self._lock:
            if plugin in self._services:
                raise RuntimeError(f"plugin {plugin!r} already has state on this host (startup ran twice?)")
            self._services[plugin] = service

    def get(self, plugin: str) -> Any:
        with self._lock:
            service = self._services.get(plugin)
        if service is None:
            raise NotReady(f"{plugin} is not ready: the server is starting or stopping, or the plugin's startup "
                           "failed. Try again in a moment; `persmem doctor` checks the plugin.")
        return service

    def pop(self, plugin: str) -> Any | None:
        with self._lock:
            return self._services.pop(plugin, None)
