"""The host: plugins, config, data folders and agents, without any server.

Building a Host is cheap (no MCP, no web framework); the CLI builds one for
every command. Serving is in `persmem_core.transport.server`.
"""

from __future__ import annotations

import functools
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from persmem_core import config as config_mod
from persmem_core import paths
from persmem_core.crypto import keys
from persmem_core.auth.agents import AgentStore
from persmem_core.auth.failures import AuthFailures
from persmem_core.errors import ConfigError, PluginConflictError, UserError
from persmem_core.auth.oauth.store import OAuthStore
from persmem_core.crypto.sealing import Sealer
from persmem_core.plugins import (
    TRACE_ENV,
    PerPlugin,
    PluginInfo,
    call_each,
    load_plugins,
    misfits,
    new_plugin_manager,
    trace_hooks,
)
from persmem_core.settings import PluginsConfig
from persmem_core.state import PluginState
from persmem_core.tool_sets import ALL_SETS, SET_NAME_RE

TOOL_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
SECTION_RE = re.compile(r"^[a-z][a-z0-9_]{0,31}$")
RESERVED_PREFIXES = ("/mcp", "/healthz")


@dataclass(frozen=True)
class ToolSpec:
    plugin: str
    name: str
    fn: Callable[..., Any]
    description: str | None = None
    max_concurrent_per_agent: int | None = None  # calls of this tool one agent may have running at once
    tool_set: str = ""  # the named set an agent is given it with (tool_sets.py); the plugin's name when not said


@dataclass(frozen=True)
class RouteSpec:
    plugin: str
    prefix: str
    app: Any
    auth: str  # "agent": only authenticated agents; "none": the app checks for itself
    title: str = ""  # a page for people (the dashboard): named in the startup line, and where / leads


def _env_list(value: str | None) -> list[str]:
    return [item.strip() for item in (value or "").split(",") if item.strip()]


class Host:
    """Loads plugins once; validates config on first use of `config`."""

    def __init__(self, *, environ: dict[str, str] | None = None, config_file: Path | None = None):
        self.environ = dict(os.environ if environ is None else environ)
        self.config_path = Path(config_file) if config_file else paths.config_path(self.environ)
        self.home = paths.home_dir(self.environ)
        self.agents = AgentStore(self.home)
        self.oauth = OAuthStore(self.home, self.agents, lambda: self.section("oauth"))  # OAuth grants act as agents
        self.auth_failures = AuthFailures()  # every place that checks a credential counts its failures here
        self.state = PluginState()  # each plugin's service, put there by its startup (persmem_core.state)
        self.warnings: list[str] = []
        self.serving_addresses: set[tuple[str, int]] = set()  # (host, port) this process listens on, once serving
        self._running = False  # startup succeeded and shutdown has not run yet
        self._raw_error: ConfigError | None = None
        try:
            self._raw = config_mod.read_file(self.config_path)
        except ConfigError as exc:
            self._raw, self._raw_error = {}, exc
        plugins_cfg = self._plugins_config()
        self.pm = new_plugin_manager()
        if self.environ.get(TRACE_ENV, "") not in ("", "0"):
            trace_hooks(self.pm, lambda line: print(line, file=sys.stderr, flush=True))
        self.plugins: list[PluginInfo] = load_plugins(
            self.pm,
            disabled=set(plugins_cfg.disabled) | set(_env_list(self.environ.get("PERSMEM_DISABLE_PLUGINS"))),
            modules=list(plugins_cfg.modules) + _env_list(self.environ.get("PERSMEM_PLUGIN_MODULES")),
        )
        self._add_plugin_hookspecs()
        self.sections: dict[str, tuple[type, str]] = self._collect_sections()

    # -- loading ------------------------------------------------------
    def _plugins_config(self) -> PluginsConfig:
        raw = self._raw.get("plugins", {})
        try:
            cfg, _ = config_mod.validate({"plugins": raw}, {"plugins": PluginsConfig}, source=str(self.config_path))
            return cfg.plugins
        except ConfigError as exc:
            self._raw_error = self._raw_error or exc
            return PluginsConfig()

    def _plugin_failed(self, plugin: str, what: str, exc: BaseException) -> None:
        for info in self.plugins:
            if info.name == plugin and info.error is None:
                info.error = f"{what}: {type(exc).__name__}: {exc}"
        if self.pm.has_plugin(plugin):
            self.pm.unregister(name=plugin)

    def _add_plugin_hookspecs(self) -> None:
        """Each plugin's `add_hookspecs`. A plugin whose hookimpl does not fit a spec another plugin adds is failed
        itself (its error names the hook and what is wrong) before the spec goes in, so one badly written plugin
        cannot take down the plugin that declares the hook (the dashboard and `register_panels`)."""
        for plugin, _, exc in call_each(self.pm, "add_hookspecs", add=PerPlugin(self._hookspecs_adder)):
            if exc is not None:
                self._plugin_failed(plugin, "add_hookspecs failed", exc)

    def _hookspecs_adder(self, declaring: str) -> Callable[[Any], None]:
        def add(namespace: Any) -> None:
            if not self.pm.has_plugin(declaring):  # failed while another plugin's hookspecs went in
                return
            for plugin, exc in list(misfits(self.pm, namespace, declaring)):
                self._plugin_failed(plugin, f"its hooks do not fit the hookspecs of plugin {declaring}", exc)
            self.pm.add_hookspecs(namespace)

        return add

    def _collect_sections(self) -> dict[str, tuple[type, str]]:
        sections: dict[str, tuple[type, str]] = {}
        for plugin, _, exc in call_each(self.pm, "register_config", register=_collector(sections, "section")):
            if exc is not None and not isinstance(exc, PluginConflictError):
                self._plugin_failed(plugin, "register_config failed", exc)
            elif exc is not None:
                raise exc
        return sections

    # -- config -------------------------------------------------------
    @functools.cached_property
    def _validated(self):
        if self._raw_error is not None:
            raise self._raw_error
        merged, env_sources = config_mod.apply_env_overrides(self._raw, self.environ)
        config, warnings = config_mod.validate(
            merged,
            {name: typ for name, (typ, _) in self.sections.items()},
            source=str(self.config_path),
            env_sources=env_sources,
        )
        self.warnings.extend(warnings)
        return config

    @property
    def config(self):
        """The validated config (raises ConfigError naming file and path)."""
        return self._validated

    def section(self, name: str):
        return getattr(self.config, name)

    def config_schema(self) -> dict[str, Any]:
        return config_mod.json_schema({name: typ for name, (typ, _) in self.sections.items()})

    # -- data ---------------------------------------------------------
    @functools.cached_property
    def sealer(self) -> Sealer:
        """What plugins seal their data at rest with (persmem_core/crypto/sealing.py), under the home's key
        (persmem_core/crypto/keys.py; a new home with [encryption] enabled gets one here). Raises SealingError, having
        written nothing, when the key the home's data needs is missing or another key is loaded."""
        return keys.load_sealer(self.home, self.section("encryption"), self.environ, create=True)

    @functools.cached_property
    def cluster(self):
        """The process's connection to the NATS JetStream cluster of [cluster] servers (persmem_core/cluster/nats_link.py),
        connected on first use; None when [cluster] servers is empty (one box). Raises UserError, naming the
        servers, when the cluster does not answer within [cluster] connect_timeout_seconds."""
        config = self.section("cluster")
        if not config.servers:
            return None
        from persmem_core.cluster.nats_link import NatsLink

        return NatsLink(config).connect()

    def data_dir(self, name: str) -> Path:
        """The folder plugin `name` owns inside the persmem home (created on demand)."""
        if not SECTION_RE.match(name):
            raise UserError(f"invalid data folder name {name!r}")
        path = self.home / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    def shared_cache(self, name: str) -> Path | None:
        """A folder for files plugins can always make again from what is installed (a prepared model), shared by
        every home that names the same `PERSMEM_CACHE_DIR`: `$PERSMEM_CACHE_DIR/<name>`, created 0700 on demand.
        None when the variable is unset: keep such files in your data folder. Refused (UserError) when the
        folder is not the server user's own or others may write in it: a planted file there would be loaded."""
        root = self.environ.get("PERSMEM_CACHE_DIR", "")
        if not root:
            return None
        if not SECTION_RE.match(name):
            raise UserError(f"invalid cache folder name {name!r}")
        path = Path(root).expanduser() / name
        for folder in (path.parent, path):
            folder.mkdir(mode=0o700, exist_ok=True)
            info = folder.lstat()
            if info.st_uid != os.geteuid() or info.st_mode & 0o022 or folder.is_symlink():
                raise UserError(f"PERSMEM_CACHE_DIR: {folder} is not this user's own folder closed to others (owner "
                                f"uid {info.st_uid}, mode {info.st_mode & 0o777:o}); a file planted there would be "
                                f"loaded as a model. Make it yours and 0700 (chown, chmod 700), or unset the variable.")
        return path

    def workspace_roots(self) -> list[Path]:
        """The [workspace] roots, resolved (links followed); default <home>/workspace, created on demand.
        / is refused: it would make the whole machine the workspace."""
        configured = [Path(os.path.realpath(Path(r).expanduser())) for r in self.section("workspace").roots]
        if Path("/") in configured:
            raise UserError("[workspace] roots contains / : that would make the whole machine the workspace. "
                            "List the project folders instead.")
        return configured or [Path(os.path.realpath(self.data_dir("workspace")))]

    def private_paths(self) -> list[Path]:
        """persmem's own files (the home: agents, mail, memories; the config file): never part of a workspace,
        never visible to a command a tool runs, even when a workspace root contains them. The owner's local socket
        too, where a long home path puts it outside the home: whoever reaches it may speak as any agent. And the
        PERSMEM_CACHE_DIR, whose files are loaded (a model): a command that wrote there would choose them."""
        private = [Path(os.path.realpath(self.home)), Path(os.path.realpath(self.config_path))]
        local_socket = Path(os.path.realpath(paths.socket_path(self.home)))
        if not local_socket.is_relative_to(private[0]):
            private.append(local_socket)
        if self.environ.get("PERSMEM_CACHE_DIR"):
            private.append(Path(os.path.realpath(Path(self.environ["PERSMEM_CACHE_DIR"]).expanduser())))
        return private

    @property
    def hook(self):
        """Call hooks, including the ones plugins added (`host.hook.unread_counts(agent=...)`)."""
        return self.pm.hook

    def loaded_plugins(self) -> list[PluginInfo]:
        return [p for p in self.plugins if p.loaded]

    # -- contributions ------------------------------------------------
    def collect_tools(self) -> list[ToolSpec]:
        tools: dict[str, ToolSpec] = {}
        for plugin, _, exc in call_each(self.pm, "register_tools", register=_collector(tools, "tool"), host=self):
            if isinstance(exc, PluginConflictError):
                raise exc
            if exc is not None:
                self._plugin_failed(plugin, "register_tools failed", exc)
                tools = {name: spec for name, spec in tools.items() if spec.plugin != plugin}
        return list(tools.values())

    def collect_routes(self) -> list[RouteSpec]:
        routes: dict[str, RouteSpec] = {}
        for plugin, _, exc in call_each(self.pm, "register_routes", register=_collector(routes, "route"), host=self):
            if isinstance(exc, PluginConflictError):
                raise exc
            if exc is not None:
                self._plugin_failed(plugin, "register_routes failed", exc)
                routes = {p: spec for p, spec in routes.items() if spec.plugin != plugin}
        return list(routes.values())

    def startup(self) -> None:
        """Every plugin's `startup`, in hook order. One rule: a startup that fails stops the server, naming
        the plugin (its tools would otherwise answer "not ready" forever); the plugins already started are
        shut down again first."""
        paths.secure_home(self.home, skip=[Path(os.path.realpath(Path(root).expanduser()))
                                           for root in self.section("workspace").roots] or [self.home / "workspace"])
        self.sealer  # a missing or wrong key stops the server here, before any plugin opens its data
        started: list[str] = []
        for plugin, _, exc in call_each(self.pm, "startup", host=self):
            if exc is None:
                started.append(plugin)
                continue
            self._plugin_failed(plugin, "startup failed", exc)
            self._shut_down(only=set(started))
            raise UserError(f"plugin {plugin!r} failed to start ({type(exc).__name__}: {exc}), so the server does not "
                            f"start. Fix what it names, or disable the plugin: [plugins] disabled = [\"{plugin}\"] "
                            f"or PERSMEM_DISABLE_PLUGINS={plugin}.") from exc
        keys.record_key_in_use(self.home, self.sealer)  # from now on this home's data needs this key
        self._running = True

    def shutdown(self) -> None:
        """Every plugin's `shutdown`, once after a successful startup (a second call does nothing)."""
        if not self._running:
            return
        self._running = False
        self._shut_down()

    def _shut_down(self, only: set[str] | None = None) -> None:
        for plugin, _, exc in call_each(self.pm, "shutdown", host=self, only=only):
            if exc is not None:
                self.warnings.append(f"plugin {plugin}: shutdown failed: {type(exc).__name__}: {exc}")
        link = self.__dict__.pop("cluster", None)  # connected by a plugin that used it: closed after them all
        if link is not None:
            link.close()


def _collector(store: dict, kind: str) -> PerPlugin:
    return PerPlugin(lambda plugin: _Collector(store, kind, plugin))


def default_tool_set(plugin: str) -> str:
    """The set of a tool registered without one: the plugin's name as a set name ("memory_hnsw"; a module
    plugin "persmem_bookmarks.plugin" -> "persmem_bookmarks")."""
    word = re.sub(r"[^a-z0-9_]", "_", plugin.split(".", 1)[0].lower())
    return (word if word[:1].isalpha() else "p" + word)[:32]


class _Collector:
    """The `register` callable handed to one plugin's hook, so the host knows who registered what."""

    def __init__(self, store: dict, kind: str, plugin: str):
        self.store, self.kind, self.plugin = store, kind, plugin

    def __call__(self, *args, **kwargs):
        return getattr(self, f"_{self.kind}")(self.plugin, *args, **kwargs)

    def _section(self, plugin: str, name: str, typ: type) -> None:
        if not SECTION_RE.match(name or ""):
            raise UserError(f"plugin {plugin!r}: invalid config section name {name!r}")
        if name in self.store:
            raise PluginConflictError.between(f"config section [{name}]", self.store[name][1], plugin)
        self.store[name] = (typ, plugin)

    def _tool(self, plugin: str, fn: Callable[..., Any], name: str | None = None, description: str | None = None,
              max_concurrent_per_agent: int | None = None, tool_set: str | None = None):
        name = name or fn.__name__
        if not TOOL_NAME_RE.match(name):
            raise UserError(f"plugin {plugin!r}: invalid tool name {name!r}")
        tool_set = tool_set or default_tool_set(plugin)
        if not SET_NAME_RE.match(tool_set) or tool_set == ALL_SETS:
            raise UserError(f"plugin {plugin!r}: tool {name!r}: invalid tool set name {tool_set!r} (a lowercase "
                            f"word, not {ALL_SETS!r})")
        if name in self.store:
            raise PluginConflictError.between(f"tool {name!r}", self.store[name].plugin, plugin)
        if max_concurrent_per_agent is not None and max_concurrent_per_agent < 1:
            raise UserError(f"plugin {plugin!r}: tool {name!r}: max_concurrent_per_agent must be at least 1")
        self.store[name] = ToolSpec(plugin=plugin, name=name, fn=fn, description=description,
                                    max_concurrent_per_agent=max_concurrent_per_agent, tool_set=tool_set)
        return fn

    def _route(self, plugin: str, prefix: str, app: Any, auth: str = "agent", title: str = ""):
        if not prefix.startswith("/") or prefix == "/" or prefix.rstrip("/") in RESERVED_PREFIXES:
            raise UserError(f"plugin {plugin!r}: route prefix {prefix!r} must start with '/' and not be /mcp or /healthz")
        if auth not in ("agent", "none"):
            raise UserError(f"plugin {plugin!r}: route auth must be 'agent' or 'none', not {auth!r}")
        prefix = prefix.rstrip("/")
        if prefix in self.store:
            raise PluginConflictError.between(f"route {prefix!r}", self.store[prefix].plugin, plugin)
        self.store[prefix] = RouteSpec(plugin=plugin, prefix=prefix, app=app, auth=auth, title=title)
        return app
