"""The memory plugin's hooks: config, tools, CLI, lifecycle, doctor, backup and restore, reseal (encryption at rest:
`persmem key migrate|rotate`), the hooks it adds, and
its answers to the sessions plugin's questions (optional hooks: that plugin may be absent; sessions_answers.py).

Hook implementations only; the service (service.py) holds the plugin's state, in `host.state`. Nothing heavy
is imported here: numpy, onnxruntime and hnswlib load when a hook needs them.
"""

from __future__ import annotations

from persmem_core.sdk import hookimpl

from . import hookspecs
from .config import MemoryConfig


@hookimpl
def add_hookspecs(add):
    add(hookspecs)


@hookimpl
def register_config(register):
    register("memory", MemoryConfig)


@hookimpl
def register_embedders(register):
    def minilm_int8(cache):
        from .embedding.embedder import OnnxEmbedder, default_model_files

        return OnnxEmbedder(default_model_files(), cache=cache)

    register("minilm-int8", minilm_int8)


@hookimpl
def startup(host):
    """Take the store now and load it in the background (the server answers MCP at once; a memory tool called
    during the load waits for it)."""
    from .service import NAME, new_service

    host.state.put(NAME, new_service(host).start_in_background())


@hookimpl
def shutdown(host):
    from .service import NAME

    service = host.state.pop(NAME)
    if service is not None:
        service.stop()


@hookimpl
def register_tools(register, host):
    from .tools import ALL_TOOLS, tool_set_of

    limit = host.section("memory").max_concurrent_per_agent
    for tool in ALL_TOOLS:
        register(tool, max_concurrent_per_agent=limit, tool_set=tool_set_of(tool))


@hookimpl
def register_panels(register, host):
    from .panels import register as register_memory_panels

    register_memory_panels(register)


@hookimpl
def register_commands(cli):
    from .commands import memory
    from .embedding.export import model

    cli.add_command(memory)
    cli.add_command(model)


@hookimpl
def doctor(host):
    from persmem_core.sdk import UserError
    from persmem_core.sdk import fail, pass_

    from .service import DATA_FOLDER, make_embedder

    try:
        # Loaded for real, as the server does (checksums, tokenizer, an inference): the memory tools send the
        # operator here when the server's load failed, so a file that only looks right must fail here too.
        embedder = make_embedder(host)
        embedder.load()
        checks = [pass_("memory embedding model", embedder.model_id)]
    except Exception as exc:  # noqa: BLE001 - reported as a FAIL line
        return [fail("memory embedding model", str(exc)[-600:])]
    folder = host.home / DATA_FOLDER
    from .service import collection_folders

    collections = [p.name for p in collection_folders(folder)]  # not .models (the prepared model files)
    checks.append(pass_("memory store", f"{folder}: {len(collections)} collection(s)"))
    try:
        checks.extend(review_checks(folder, host.sealer))
    except UserError as exc:  # SealingError: a sealed log this key does not open (the message names the fix)
        checks.append(fail("memory review dates", str(exc)))
    if host.section("cluster").servers:
        checks.append(cluster_check(host))
    return checks


def cluster_check(host):
    """The memory stream on the cluster ([cluster] servers): PASS with its size and leader, WARN naming replicas
    offline or behind, FAIL when the cluster does not answer."""
    from persmem_core.sdk import fail, pass_, warn

    from .cluster.replication import Replication

    cluster = host.section("cluster")
    try:
        problems, summary = Replication(host.cluster, host.sealer, replicas=cluster.replicas,
                                        timeout=cluster.request_timeout_seconds).stream_report()
    except Exception as exc:  # noqa: BLE001 - reported as a FAIL line
        return fail("memory replication", f"NATS JetStream: {type(exc).__name__}: {exc}")
    if problems:
        return warn("memory replication", f"{summary}; " + "; ".join(problems))
    return pass_("memory replication", summary)


SHOWN_IDS = 5  # ids a doctor line names; memory_get and the dashboard's Lifecycle panel show the rest


def _first_ids(ids: list[str]) -> str:
    return ", ".join(ids[:SHOWN_IDS]) + (", ..." if len(ids) > SHOWN_IDS else "")


def review_checks(folder, sealer) -> list:
    """WARN lines for memories whose review_after has passed (still searched) or whose valid_until has (hidden
    from search), per collection, with counts and the first ids. Read from the logs without the owner lock
    (snapshot.py), so it works next to a running server."""
    import time

    from persmem_core.sdk import pass_, warn

    from .search.weighing import expired, review_due
    from .snapshot import read_store

    now, due, gone = time.time(), [], []
    for name, snapshot in sorted(read_store(folder, sealer).items()):
        review, old = [], []
        for memory in snapshot.memories():  # oldest first
            if expired(memory.valid_until, now):
                old.append(memory.id)
            elif review_due(memory.review_after, now):
                review.append(memory.id)
        if review:
            due.append(f"{len(review)} in {name} ({_first_ids(review)})")
        if old:
            gone.append(f"{len(old)} in {name} ({_first_ids(old)})")
    checks = []
    if due:
        checks.append(warn("memories due for review", "; ".join(due) + ". Still searched, marked review_due: check "
                           "each (memory_get), then memory_update it (a new review_after, or review_after=\"none\") "
                           "or store what is true now."))
    if gone:
        checks.append(warn("memories expired", "; ".join(gone) + ". Past their valid_until, hidden from search "
                           "(memory_search include_expired=true shows them): memory_update valid_until renews one, "
                           "memory_delete removes it."))
    if not checks:
        checks.append(pass_("memory review dates", "no memory is due for review or expired"))
    return checks


@hookimpl
def backup(host, dest):
    """Copy each collection's log up to its last complete entry (consistent by construction)."""
    from .backup import backup_memory
    from .service import DATA_FOLDER

    backup_memory(host.home / DATA_FOLDER, dest)


@hookimpl
def restore(host, src):
    """Put the collections' logs back, under the store's owner lock; the index is rebuilt on first open."""
    from .backup import restore_memory
    from .service import DATA_FOLDER, MemoryService

    # No embedder: restoring copies logs and loads no model (the restored config's model may be elsewhere).
    restore_memory(MemoryService(host.data_dir(DATA_FOLDER), host.section("memory"), embedder=None), src)


@hookimpl
def reseal(host, sealer, progress, dry_run):
    """Reseal every collection's log, index and retrieval counts, each atomically, under the store's owner lock
    (reseal.py); with dry_run, count what would be rewritten."""
    from .reseal import reseal_store
    from .service import DATA_FOLDER

    return reseal_store(host.home / DATA_FOLDER, host.section("memory"), sealer, progress, dry_run)


# -- the sessions plugin's questions (its hookspecs.py); called from its worker thread and its web routes ----

@hookimpl(optionalhook=True)
def index_session_turns(host, agent, turns):
    from .service import service
    from .sessions_answers import index_turns

    return index_turns(service(host), agent, turns)


@hookimpl(optionalhook=True)
def search_session_turns(host, agent, query, project, session_id, top_k):
    from .service import service
    from .sessions_answers import search_turns

    return search_turns(service(host), agent, query, project, session_id, top_k)


@hookimpl
def briefing_sections(host, agent, project, cwd, budget_chars):
    from .service import service
    from .session_briefing import briefing

    return briefing(service(host), agent, project, cwd, budget_chars)


@hookimpl(optionalhook=True)
def recall_for_prompt(host, agent, project, prompt, exclude_ids, top_k):
    from .service import service
    from .session_briefing import recall

    return recall(service(host), agent, project, prompt, exclude_ids, top_k)
