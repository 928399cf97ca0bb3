"""The memory plugin's hooks: config, tools, CLI, lifecycle, doctor, backup, and the hooks it adds.

Nothing heavy is imported here: onnxruntime and hnswlib load in `startup`.
"""

from __future__ import annotations

from persmem_core import hookimpl

from . import hookspecs
from .config import MemoryConfig

DATA_FOLDER = "memory"
_services: dict[int, object] = {}


@hookimpl
def add_hookspecs(add):
    add(hookspecs)


@hookimpl
def register_config(register):
    register("memory", MemoryConfig)


@hookimpl
def register_embedders(register):
    def minilm_int8(cache):
        from .embedder import OnnxEmbedder, default_model_files

        return OnnxEmbedder(default_model_files(), cache=cache)

    register("minilm-int8", minilm_int8)


def make_embedder(host):
    config = host.section("memory")
    if config.model_dir:
        from .embedder import OnnxEmbedder, folder_model_files

        return OnnxEmbedder(folder_model_files(config.model_dir))
    factories = {}
    host.hook.register_embedders(register=lambda name, factory: factories.setdefault(name, factory))
    if config.embedder not in factories:
        from persmem_core import UserError

        raise UserError(f"[memory] embedder = {config.embedder!r} is not offered by any plugin; "
                        f"available: {', '.join(sorted(factories))}.")
    return factories[config.embedder](host.data_dir(DATA_FOLDER) / ".models")


def new_service(host):
    """The host's memory service, not started yet."""
    from .service import MemoryService

    return MemoryService(host.data_dir(DATA_FOLDER), host.section("memory"), make_embedder(host))


def open_service(host):
    """Take the store and load it now (CLI commands)."""
    return new_service(host).start()


def service_for(host):
    """The host's memory service, once loaded (waits while the server is still loading it)."""
    service = _services.get(id(host))
    if service is None:
        from persmem_core import UserError

        raise UserError("the memory store is not open (the server is starting or stopping); try again shortly.")
    service.wait_ready()
    return service


@hookimpl
def startup(host):
    _services[id(host)] = new_service(host).start_in_background()


@hookimpl
def shutdown(host):
    service = _services.pop(id(host), None)
    if service is not None:
        service.stop()


@hookimpl
def register_tools(register, host):
    from .tools import ALL_TOOLS

    limit = host.section("memory").max_concurrent_per_agent
    for tool in ALL_TOOLS:
        register(tool, max_concurrent_per_agent=limit)


@hookimpl
def register_panels(register, host):
    from .panels import register as register_memory_panels

    register_memory_panels(register)


@hookimpl
def register_commands(cli):
    from .commands import memory
    from .export import model

    cli.add_command(memory)
    cli.add_command(model)


@hookimpl
def doctor(host):
    from persmem_core.doctor import fail, pass_

    try:
        # Loaded for real, as the server does (checksums, tokenizer, an inference): the memory tools send the
        # operator here when the server's load failed, so a file that only looks right must fail here too.
        embedder = make_embedder(host)
        embedder.load()
        checks = [pass_("memory embedding model", embedder.model_id)]
    except Exception as exc:  # noqa: BLE001 - reported as a FAIL line
        return [fail("memory embedding model", str(exc)[-600:])]
    folder = host.home / DATA_FOLDER
    collections = [p.name for p in folder.iterdir() if p.is_dir()] if folder.exists() else []
    checks.append(pass_("memory store", f"{folder}: {len(collections)} collection(s)"))
    return checks


@hookimpl
def backup(host, dest):
    """Copy each collection's log up to its last complete entry (consistent by construction)."""
    from .backup import backup_memory

    backup_memory(host.home / DATA_FOLDER, dest)
