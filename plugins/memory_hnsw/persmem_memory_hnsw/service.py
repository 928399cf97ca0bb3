"""The memory plugin's service: all collections of one persmem home and the embedder they share.

The server's `startup` puts one in `host.state` under NAME and loads it in the background; entry points
(tools, panels) get it with `service(host)`, which waits for that load. CLI commands open their own for the
length of the command (`open_service`).

One process owns the memory folder at a time (an exclusive lock file), so
two servers never write the same log; share one server over HTTP instead.

The service seals what it writes with the home's Sealer (`host.sealer`, handed to every collection). Before the
server takes the store, the key ids its sealed files name are checked against the keys on hand (store/key_check.py):
a missing or wrong key stops the server with the file and the fix named, before anything is written.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path

from persmem_core.sdk import Sealer, UserError, fsync_dir

from .access import AgentMemory
from .collection import Collection
from .config import MemoryConfig
from .embedding.background import BackgroundEmbedder
from .store.key_check import check_keys
from .store.log import LOG_NAME, write_failed
from .store.query import did_you_mean, shown

NAME = "memory_hnsw"  # the plugin's entry-point name: its key in host.state
DATA_FOLDER = "memory"  # $PERSMEM_HOME/memory
COLLECTION_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
DEFAULT_COLLECTION = "memories"  # the tools' default: opened (made if missing) at every start, never capped


def check_collection_name(name) -> None:
    if not isinstance(name, str) or not COLLECTION_RE.match(name):
        raise UserError(f"invalid collection name {shown(name)}: 1-64 lowercase letters, digits, '_' or '-'.")


class StoreInUse(UserError):
    """Another process (a server, usually) holds the store's owner lock; `owner_pid` is its pid, if known."""

    def __init__(self, message: str, owner_pid: int | None):
        super().__init__(message)
        self.owner_pid = owner_pid


def _stream_name_ok(name: str) -> bool:
    """A collection name the memory stream holds writes of that this node can open; another is logged, not opened
    (only something other than a persmem node could have written it)."""
    if COLLECTION_RE.match(name):
        return True
    logging.getLogger("persmem.memory").error("the memory stream holds writes to %r, which is not a collection name; "
                                              "they are left alone", name[:80])
    return False


def collection_folders(folder: Path) -> list[Path]:
    """The collections of a memory folder: its subfolders with a collection's name. The embedder's `.models`
    cache (and any other dot-folder) is not a collection; doctor, stats and backups count only these."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return [path for path in sorted(folder.iterdir()) if path.is_dir() and COLLECTION_RE.match(path.name)]


# What opening a collection writes before anything is stored in it: a collection folder holding only these, its
# log empty, never held a memory (reads made such folders before they stopped creating collections).
NEVER_WRITTEN_FILES = frozenset({LOG_NAME, "model.json"})


def drop_never_written(folder: Path) -> bool:
    """Remove the collection folder `folder` if it never held a memory (an empty log and the model record, nothing
    else), so it is neither opened nor counted against [memory] max_collections; True if it was removed. Only by
    the service that holds the owner lock, before opening the collections."""
    try:
        entries = list(folder.iterdir())
        if not {path.name for path in entries} <= NEVER_WRITTEN_FILES or any(
                path.name == LOG_NAME and path.stat().st_size for path in entries):
            return False
        for path in entries:
            path.unlink()
        folder.rmdir()
        fsync_dir(folder.parent)
    except OSError as exc:  # left as it is, and opened as before
        logging.getLogger("persmem.memory").warning("empty collection %s could not be removed: %s", folder.name, exc)
        return False
    logging.getLogger("persmem.memory").info("collection %s removed: it never held a memory (made by a read before "
                                             "reads stopped creating collections)", folder.name)
    return True


def make_embedder(host):
    """The embedder `[memory]` configures: an ONNX folder (model_dir), or one a plugin offers by name."""
    config = host.section("memory")
    if config.model_dir:
        from .embedding.embedder import OnnxEmbedder, folder_model_files

        return OnnxEmbedder(folder_model_files(config.model_dir))
    factories = {}
    host.hook.register_embedders(register=lambda name, factory: factories.setdefault(name, factory))
    if config.embedder not in factories:
        raise UserError(f"[memory] embedder = {config.embedder!r} is not offered by any plugin; "
                        f"available: {', '.join(sorted(factories))}.")
    # where the embedder keeps the model it prepares (re-quantized once): shared by the homes of one
    # PERSMEM_CACHE_DIR, else by the user's homes (~/.cache/persmem/models), else beside the collections
    from .embedding.prepare import user_model_cache

    cache = host.shared_cache("models") or user_model_cache(host.environ)
    return factories[config.embedder](cache or host.data_dir(DATA_FOLDER) / ".models")


def new_service(host) -> MemoryService:
    """The host's memory service, not started yet (nothing locked, nothing loaded). On a cluster ([cluster]
    servers) its collections follow the memory stream (cluster/replication.py); connecting waits for the cluster."""
    replication = None
    if host.cluster is not None:
        from .cluster.replication import Replication

        cluster = host.section("cluster")
        replication = Replication(host.cluster, host.sealer, replicas=cluster.replicas,
                                  timeout=cluster.request_timeout_seconds)
    return MemoryService(host.data_dir(DATA_FOLDER), host.section("memory"), make_embedder(host), host.sealer,
                         replication)


def open_service(host) -> MemoryService:
    """A service of its own, locked and loaded now, for a CLI command (stop it when the command ends: that waits
    until what it stored is embedded)."""
    service = new_service(host)
    service.drain_on_stop = True
    return service.start()


def service(host) -> MemoryService:
    """The running server's service, for tools and panels: waits while it is still loading; NotReady before
    startup or after shutdown."""
    running = host.state.get(NAME)
    running.wait_ready()
    return running


class MemoryService:
    def __init__(self, folder: Path, config: MemoryConfig, embedder, sealer: Sealer | None = None, replication=None):
        """`sealer`: the home's (host.sealer); None writes plaintext and refuses sealed files. `replication`: the
        cluster's memory stream (replication.Replication), or None on one box."""
        self.folder, self.config, self.embedder = Path(folder), config, embedder
        self.sealer = sealer or Sealer.plain()
        self._collections: dict[str, Collection] = {}
        self._open_lock = threading.RLock()
        self._lock_file = None
        self._ready = threading.Event()
        self._failure: str | None = None  # what callers are told when the background load failed
        self._loader: threading.Thread | None = None
        self._consolidation = None  # the idle-time ConsolidationJob (the server's only; consolidate.py)
        # Embeds stores after they are acknowledged (embedding/background.py). A server stops it without waiting (what is
        # left is embedded at the next start); a CLI command's service waits for it (`drain_on_stop`).
        self.embedding = BackgroundEmbedder(batch=config.embed_batch) if embedder is not None else None
        self.drain_on_stop = False
        self.replication = replication

    def start(self) -> MemoryService:
        """Take the store and load everything now (the CLI's way)."""
        self.lock()
        self.load()
        return self

    def start_in_background(self) -> MemoryService:
        """Take the store now, load the model and the collections in a thread (the server's way: it answers
        MCP at once; a memory tool called during the load waits for it). Once loaded, the idle-time
        consolidation job starts ([memory] consolidate_every_hours; the CLI's services never run it). A sealed
        file whose key is not on hand stops it here, before the lock file is written (check_keys)."""
        check_keys(collection_folders(self.folder), self.sealer)
        self.lock()
        self._loader = threading.Thread(target=self._load_quietly, name="memory-load", daemon=True)
        self._loader.start()
        return self

    def _load_quietly(self) -> None:
        """Load in the background. A failure is logged in full; every memory tool call is told in short what
        failed, without the model's exception text (it names install paths, even a child's traceback)."""
        model_loaded = False
        try:
            self.embedder.load()
            model_loaded = True
            self.load()
            from .lifecycle.consolidation_job import ConsolidationJob

            self._consolidation = ConsolidationJob(self, self.config).start()
        except BaseException as exc:  # noqa: BLE001 - kept and reported to every caller
            if getattr(exc, "server_stopping", False):  # stop() cancelled the model's preparation: nothing failed
                self._failure = "the server is stopping."
                self._ready.set()
                return
            what = "the memory store failed to open" if model_loaded else "the embedding model failed to load"
            logging.getLogger("persmem.memory").exception("%s", what)
            if model_loaded and isinstance(exc, UserError):
                what += f" ({exc})"  # written for the caller with its fix (say, vectors of another model)
            self._failure = (f"{what}, so the memory tools are unavailable. The server log has the details; "
                             "the operator can run `persmem doctor` on the server to check the model and the store.")
            self._ready.set()

    def wait_ready(self, timeout: float = 300.0) -> None:
        if not self._ready.wait(timeout):
            raise UserError("the memory store is still loading (a large store is being indexed); try again shortly.")
        if self._failure is not None:
            raise UserError(self._failure)

    def lock(self) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(self.folder / ".owner.lock", os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        self._lock_file = os.fdopen(fd, "a+")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.seek(0)
            owner = self._lock_file.read().strip()
            self._lock_file.close()
            self._lock_file = None
            raise StoreInUse(
                f"{self.folder} is in use by another persmem process. Stop it, or connect to that server over "
                "HTTP instead of starting a second one (two processes must never write one memory store).",
                owner_pid=int(owner) if owner.isdigit() else None,
            ) from None
        self._lock_file.truncate(0)
        self._lock_file.write(str(os.getpid()))
        self._lock_file.flush()

    def load(self) -> None:
        self.embedder.load()
        if self.embedding is not None and not self.embedding.running:
            self.embedding.start()
        on_stream: set[str] = set()
        if self.replication is not None:
            self.replication.ensure_stream()
            on_stream = {name for name in self.replication.collections() if _stream_name_ok(name)}
        names = [path.name for path in self._collection_folders()
                 if path.name in on_stream or path.name == DEFAULT_COLLECTION or not drop_never_written(path)]
        if self.replication is not None:
            names = sorted(set(names) | on_stream)
            self.replication.watch_collections(self._discovered)
        for name in names:
            self._open(name)
        self._open(DEFAULT_COLLECTION)  # the tools' default is always there: reads of it never fail for want of it
        self._ready.set()

    def _discovered(self, name: str) -> None:
        """A collection another node wrote to (the stream's watcher): open it here too, following the stream."""
        if name not in self._collections and COLLECTION_RE.match(name):
            try:
                self._open(name)  # whatever this node's count: the cluster made it
            except Exception:  # noqa: BLE001 - opened on first use instead
                logging.getLogger("persmem.memory").exception("collection %s (written on another node) did not open",
                                                              name)

    def reindex(self) -> Iterator[tuple[str, int]]:
        """Re-embed every collection with the configured embedder and rebuild its index (after a model change),
        one collection open at a time; yields (collection name, memories re-embedded). Only on a service that
        holds the lock (`lock()`) and has loaded nothing: the collections' vectors may be of another model."""
        self.embedder.load()
        for path in self._collection_folders():
            col = Collection(path.name, path, self.embedder, self.config, self.sealer).open(reindex=True)
            yield path.name, len(col.memories)
            col.close()

    def _collection_folders(self) -> list[Path]:
        return collection_folders(self.folder)

    def stop(self) -> None:
        if self._loader is not None:
            getattr(self.embedder, "cancel", lambda: None)()  # a model preparation under way ends now
            self._loader.join()
        if self._consolidation is not None:  # before the collections close under it
            self._consolidation.stop()
            self._consolidation = None
        if self.embedding is not None:
            self.embedding.stop(drain=self.drain_on_stop)
        if self.replication is not None:
            self.replication.stop()
        for collection in self._collections.values():
            collection.close()
        self._collections.clear()
        if self._lock_file is not None:
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()
            self._lock_file = None

    def collection(self, name: str, *, create: bool = False) -> Collection:
        """The open collection `name`. Reads ask without `create`: a name that does not exist is a UserError naming
        the collections there are (a read never makes one). A write passes `create=True`: a new name is made while
        the server holds fewer than `[memory] max_collections` (the default collection and the private ones are
        always made), else refused naming the cap. On a cluster a collection another node made is opened here,
        whatever this node's count: the stream decides what exists."""
        check_collection_name(name)
        existing = self._collections.get(name)
        if existing is not None:
            return existing
        on_stream = self.replication.collections() if self.replication is not None else []
        if name in on_stream:
            return self._open(name)
        if not create:
            raise self.no_such_collection(name)
        with self._open_lock:  # the count and the making as one step: concurrent writers never pass the cap
            if name not in self._collections:
                self._check_room(name, on_stream)
            return self._open(name)

    def no_such_collection(self, name: str) -> UserError:
        """What a read naming a collection that does not exist is told."""
        return UserError(f"{did_you_mean('collection', name, self._collections)} Reads never create a collection; "
                         "a memory_store (or memory_bulk_store) into a new name creates it (memory_list_collections, "
                         "in the opt-in curation tool set, lists them).")

    def _check_room(self, name: str, on_stream: list[str]) -> None:
        """Refuse to make collection `name` when the server holds [memory] max_collections already (the caller
        holds the open lock). The default collection and the private ones are the server's own: always made."""
        if name == DEFAULT_COLLECTION or name in self.config.private_collections:
            return
        held = set(self._collections) | set(on_stream)
        cap = self.config.max_collections
        if len(held) >= cap:
            raise UserError(
                f"collection {name!r} was not created: this server holds {len(held)} collections, the most "
                f"[memory] max_collections = {cap} allows (each is opened, about 2 MB of memory, at every start). "
                f"Store into an existing one ({', '.join(sorted(held)[:10])}{', ...' if len(held) > 10 else ''}), "
                "or ask the operator to raise [memory] max_collections in "
                "persmem.toml and restart the server.")

    def _open(self, name: str) -> Collection:
        """Open (or make: the caller decided it may) collection `name`, once: concurrent callers get the same one."""
        with self._open_lock:
            if name not in self._collections:
                try:
                    folder = self.folder / name
                    if self.replication is not None and not (folder / LOG_NAME).exists():
                        restored = self.replication.restore_snapshot(name, folder)  # a new node: from a snapshot
                        if restored:
                            logging.getLogger("persmem.memory").info(
                                "collection %s: started from the cluster's snapshot at stream sequence %d", name,
                                restored)
                    opened = Collection(name, folder, self.embedder, self.config, self.sealer, self.embedding,
                                        self.replication).open()
                    if self.replication is not None:
                        try:
                            opened.follow()  # and catch up with the stream before anyone reads it here
                        except BaseException:
                            opened.close()  # not half open: nothing may write its log but a collection in use
                            raise
                    self._collections[name] = opened
                except OSError as exc:  # a new collection on a full or read-only disk
                    logging.getLogger("persmem.memory").error("collection %s could not be opened: %s", name, exc)
                    raise UserError(write_failed(self.folder, exc, f"collection {name!r} could not be opened")) from None
        return self._collections[name]

    def collections(self) -> dict[str, Collection]:
        return dict(self._collections)

    def as_agent(self, agent: str) -> AgentMemory:
        """The store as `agent` may read and change it: the door tools, panels and other plugins use (access.py
        applies the permission rules)."""
        return AgentMemory(self, agent)
