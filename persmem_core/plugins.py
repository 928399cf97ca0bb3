"""Finding, loading and listing plugins.

Plugins come from the entry-point group `persmem.plugins` (the core's own
defaults are registered there too) and, for development, from plain module
names in `[plugins] modules` / `PERSMEM_PLUGIN_MODULES`. A plugin that fails
to import is recorded and skipped; it never takes the host down.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pluggy

from persmem_core import hookspecs

ENTRY_POINT_GROUP = "persmem.plugins"
TRACE_ENV = "PERSMEM_TRACE_HOOKS"  # set (to anything but "" or "0"): every hook call is written to stderr


@dataclass
class PluginInfo:
    name: str
    version: str | None
    source: str
    hooks: list[str] = field(default_factory=list)
    disabled: bool = False
    error: str | None = None

    @property
    def loaded(self) -> bool:
        return not self.disabled and self.error is None


def new_plugin_manager() -> pluggy.PluginManager:
    pm = pluggy.PluginManager(hookspecs.PROJECT)
    pm.add_hookspecs(hookspecs)
    return pm


def trace_hooks(pm: pluggy.PluginManager, write: Callable[[str], None]) -> None:
    """Write one line per hook call from now on: the hook, the argument names (never their values: they may hold
    a token), which plugins answered, and how long it took. The core's hooks (`call_each`) give a line per plugin;
    the hooks plugins offer each other (`host.hook.X(...)`) a line per call."""
    calls = threading.local()  # each thread's stack of start times: tools call hooks from worker threads at once

    def before(hook_name: str, impls: list, kwargs: dict) -> None:
        calls.__dict__.setdefault("started", []).append(time.perf_counter())

    def after(outcome, hook_name: str, impls: list, kwargs: dict) -> None:
        took = (time.perf_counter() - calls.started.pop()) * 1000
        who = ", ".join(impl.plugin_name for impl in reversed(impls)) or "no plugin"
        failed = outcome.exception
        write(f"persmem hook {hook_name}({', '.join(kwargs)}) <- {who}: "
              + (f"failed: {_describe(failed)}" if failed else f"{_answers(outcome.get_result())}")
              + f" ({took:.1f} ms)")

    pm.add_hookcall_monitoring(before, after)
    pm.persmem_trace = write  # read by call_each


def _answers(result: Any) -> str:
    return f"{len(result)} answer(s)" if isinstance(result, list) else "answered"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _register(pm: pluggy.PluginManager, obj: Any, info: PluginInfo) -> None:
    try:
        pm.register(obj, name=info.name)
    except Exception as exc:  # a bad hookimpl signature, a duplicate name
        info.error = _describe(exc)
        return
    wrapped = [caller.name for caller in pm.get_hookcallers(obj) or [] if hasattr(hookspecs, caller.name)
               and any(i.plugin is obj and (i.hookwrapper or i.wrapper) for i in caller.get_hookimpls())]
    if wrapped:  # call_each calls each implementation on its own: a wrapper would silently never wrap
        pm.unregister(obj)
        info.error = (f"hook wrappers are not supported on persmem's own hooks ({', '.join(sorted(wrapped))}); "
                      "implement the hook plainly")
        return
    info.hooks = sorted(impl_name for impl_name in _hook_names(pm, obj))


def _hook_names(pm: pluggy.PluginManager, obj: Any) -> Iterator[str]:
    for caller in pm.get_hookcallers(obj) or []:
        yield caller.name


def load_plugins(
    pm: pluggy.PluginManager, *, disabled: set[str], modules: list[str]
) -> list[PluginInfo]:
    """Register every plugin that is installed and not disabled; return one PluginInfo each."""
    infos: list[PluginInfo] = []
    seen: set[str] = set()
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.name in seen:
            continue
        seen.add(ep.name)
        version = ep.dist.version if ep.dist is not None else None
        dist_name = ep.dist.metadata["Name"] if ep.dist is not None else "?"
        info = PluginInfo(name=ep.name, version=version, source=f"{dist_name} (entry point {ep.value})")
        infos.append(info)
        if ep.name in disabled:
            info.disabled = True
            continue
        try:
            obj = ep.load()
        except BaseException as exc:  # noqa: BLE001 - SyntaxError, SystemExit...: report, never crash
            if isinstance(exc, KeyboardInterrupt):
                raise
            info.error = _describe(exc)
            continue
        _register(pm, obj, info)
    for module_name in modules:
        if module_name in seen:
            continue
        seen.add(module_name)
        info = PluginInfo(name=module_name, version=None, source=f"module {module_name}")
        infos.append(info)
        if module_name in disabled:
            info.disabled = True
            continue
        try:
            obj = importlib.import_module(module_name)
        except BaseException as exc:  # noqa: BLE001
            if isinstance(exc, KeyboardInterrupt):
                raise
            info.error = _describe(exc)
            continue
        _register(pm, obj, info)
    return infos


def misfits(pm: pluggy.PluginManager, namespace: Any, declaring: str) -> Iterator[tuple[str, Exception]]:
    """The plugins other than `declaring` whose hookimpls do not fit the hookspecs in `namespace`, each with
    pluggy's PluginValidationError (which names the plugin, the hook and what is wrong). pluggy itself checks, on a
    scratch plugin manager holding only those specs: adding them to `pm` would fail on the first misfit, and leave
    the specs before it added and the rest not, so the host fails the misfits first and then adds the specs."""
    scratch = pluggy.PluginManager(pm.project_name)
    scratch.add_hookspecs(namespace)
    for name, plugin in pm.list_name_plugin():
        if name == declaring or plugin is None:
            continue
        try:
            scratch.register(plugin, name=name)
        except pluggy.PluginValidationError as exc:
            yield name, exc


class PerPlugin:
    """A hook argument made anew for each plugin: `PerPlugin(lambda plugin_name: ...)`."""

    def __init__(self, factory):
        self.factory = factory


def call_each(pm: pluggy.PluginManager, hook_name: str, only: set[str] | None = None,
              **kwargs: Any) -> Iterator[tuple[str, Any, BaseException | None]]:
    """Call one of persmem's own hooks plugin by plugin (or only the plugins in `only`), yielding (plugin
    name, result, error).

    This is how the host calls every hook in hookspecs.py. It differs from `pm.hook.X(...)` on purpose: it
    knows who answered, and one plugin's exception does not hide the others' answers. The order is pluggy's
    (last registered first; tryfirst/trylast respected); the core's hooks have no firstresult, and hook
    wrappers are refused on them when a plugin loads (`_register`), so nothing pluggy would do is lost.
    Hooks that plugins add for each other (`add_hookspecs`) are called with plain pluggy: `host.hook.X()`."""
    caller = getattr(pm.hook, hook_name)
    trace = getattr(pm, "persmem_trace", None)
    for impl in reversed(caller.get_hookimpls()):
        if only is not None and impl.plugin_name not in only:
            continue
        args = [kwargs[name] for name in impl.argnames]
        args = [a.factory(impl.plugin_name) if isinstance(a, PerPlugin) else a for a in args]
        started = time.perf_counter()
        try:
            result, error = impl.function(*args), None
        except Exception as exc:  # noqa: BLE001 - reported by the caller, with the plugin's name
            result, error = None, exc
        if trace is not None:
            trace(f"persmem hook {hook_name}({', '.join(impl.argnames)}) <- {impl.plugin_name}: "
                  + (f"failed: {_describe(error)}" if error else "answered")
                  + f" ({(time.perf_counter() - started) * 1000:.1f} ms)")
        yield impl.plugin_name, result, error
