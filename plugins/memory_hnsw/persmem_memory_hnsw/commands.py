"""`persmem memory ...`: maintenance commands that work on the store directly.

`stats` and `export` only read: they read the record logs without the owner lock (snapshot.py), so they work
while a server runs and see what it has written. `import`, `import-chroma`, `reindex` and `consolidate` write:
they take the store's owner lock and, while a server holds it, refuse and say how to go on (stop it, or use the
MCP tools).
Times are printed as ISO 8601 (UTC), like the tools show them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from persmem_core.sdk import UserError


def _memory_folder() -> Path:
    from persmem_core.sdk import get_host

    from .service import DATA_FOLDER

    return get_host().home / DATA_FOLDER


def _read_store():
    """Every collection as its log holds it now, read without the owner lock (snapshot.py), sealed frames opened
    with the home's key."""
    from persmem_core.sdk import get_host

    from .snapshot import read_store

    return read_store(_memory_folder(), get_host().sealer)


def _take_store(command: str, while_running: str = ""):
    """The store locked for this writing command (not loaded yet); stop it when done. While a server owns the
    store the command is refused, naming it and `while_running`: what to do instead without stopping it."""
    from persmem_core.sdk import get_host

    from .service import StoreInUse, new_service

    service = new_service(get_host())
    try:
        service.lock()
    except StoreInUse as busy:
        owner = f" (pid {busy.owner_pid})" if busy.owner_pid else ""
        raise click.ClickException(
            f"a persmem server is running on this store{owner}: `persmem memory {command}` writes to the store "
            f"and needs it stopped (two processes must never write one store). Stop the server, run the command, "
            f"then start the server again{'; ' + while_running if while_running else '.'}") from None
    return service


def _open(command: str, while_running: str):
    """The store, locked and loaded, for this writing command's length (stop it when done)."""
    service = _take_store(command, while_running)
    try:
        service.load()
    except BaseException:
        service.stop()
        raise
    return service


def _iso_times(stats: dict) -> dict:
    from .store.records import iso

    for key in ("oldest", "newest"):
        stats[key] = iso(stats[key]) if stats.get(key) is not None else None
    return stats


_IMPORT_WHILE_RUNNING = ("or, without stopping it, send the memories over MCP with memory_bulk_store "
                         "(up to 1000 per call), which works while it runs.")


@click.group()
def memory() -> None:
    """Memory store: search, and maintenance: stats, reindex, consolidate, export/import JSONL, import a persMEM
    ChromaDB store."""


@memory.command()
@click.option("--collection", default=None, help="Only this collection.")
def stats(collection: str | None) -> None:
    """Print counts per collection (works while a server runs: it reads the record logs as they are)."""
    from .store.query import did_you_mean

    store = _read_store()
    if collection is not None and collection not in store:
        raise click.ClickException(did_you_mean("collection", collection, store))
    if not store:
        click.echo("no collections yet: nothing has been stored.", err=True)
    for name, snapshot in sorted(store.items()):
        if collection in (None, name):
            click.echo(json.dumps(_iso_times(snapshot.stats()), indent=2, ensure_ascii=False))


@memory.command()
def reindex() -> None:
    """Re-embed every memory with the configured embedder (after changing models) and rebuild the index."""
    service = _take_store("reindex")
    try:
        for name, count in service.reindex():
            click.echo(f"{name}: re-embedded {count} memories with {service.embedder.model_id}")
    finally:
        service.stop()


@memory.command("export")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--collection", default=None, help="Only this collection (default: all).")
def export_(path: Path, collection: str | None) -> None:
    """Write every memory (with its history, links, feedback and validity dates) as JSON Lines to PATH ('-' for
    stdout). Works while a server runs: it reads the record logs as they are."""
    from .export_format import record_of
    from .store.query import did_you_mean

    store = _read_store()
    if collection is not None and collection not in store:
        raise click.ClickException(did_you_mean("collection", collection, store))
    out = sys.stdout if str(path) == "-" else open(path, "w", encoding="utf-8")
    count = 0
    try:
        for name, snapshot in sorted(store.items()):
            if collection not in (None, name):
                continue
            for memory in snapshot.memories():
                out.write(json.dumps(record_of(memory), ensure_ascii=False) + "\n")
                count += 1
    finally:
        if out is not sys.stdout:
            out.close()
    click.echo(f"exported {count} memories", err=True)


KEEP_IDENTITIES = "--keep-identity-entries"


@memory.command("import")
@click.argument("path", type=click.Path(exists=True, path_type=Path, dir_okay=False))
@click.option("--keep-identity-entries", "keep_identities", is_flag=True,
              help="Also import the file's identity and directive entries under the authors it names. Those are "
                   "pinned into each author's sessions as that agent's own voice: only for a file you trust, such "
                   "as an export of your own store.")
def import_(path: Path, keep_identities: bool) -> None:
    """Import memories from a JSON Lines file written by `persmem memory export` (ids, authors, times, links,
    feedback and validity dates kept). Identity and directive entries are left out unless --keep-identity-entries
    says the file is trusted."""
    from .export_format import memory_of

    batches: dict[str, list] = {}
    links: dict[str, dict[str, dict]] = {}  # collection -> id -> the lifecycle fields set after the store
    with open(path, encoding="utf-8") as f:  # read whole before the store is opened: a bad line costs no wait
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                item, lifecycle = memory_of(rec)
            except (json.JSONDecodeError, KeyError, TypeError, ValueError, UserError) as exc:
                raise click.ClickException(f"{path}:{number}: not a memory record ({exc}).") from None
            name = rec.get("collection", "memories")
            batches.setdefault(name, []).append(item)
            if item.memory_id and any(lifecycle.values()):
                links.setdefault(name, {})[item.memory_id] = lifecycle
    held = _hold_back_identities(batches, keep_identities)
    service = _open("import", _IMPORT_WHILE_RUNNING)
    try:
        stored = _store_batches(service, batches, author="import")
        for name, fields in links.items():
            # Only the memories this import stored: one already present keeps its own links and feedback.
            restored = _restore_links(service.collection(name),
                                      {k: v for k, v in fields.items() if k in stored.get(name, set())})
            if restored:
                click.echo(f"{name}: restored the links and feedback of {restored} memories")
        _say_held_back(held, "persmem memory import", path)
    finally:
        service.stop()


def _hold_back_identities(batches: dict[str, list], keep: bool) -> dict[str, int]:
    """Take the identity and directive entries out of `batches` unless `keep`: the number left out, by author.
    Such an entry is pinned into its author's sessions as that agent's own voice (session_briefing.briefing),
    and a file can name any author: whoever wrote the file (a prompt-injected agent can write files) would speak
    as that agent in every session it starts. Importing them is the operator's explicit word that the file is
    trusted; without it they are left out, and a second import with the flag adds just them (ids already present
    are skipped)."""
    from .permissions import BOOTSTRAP_TYPES

    held: dict[str, int] = {}
    if keep:
        return held
    for name, items in batches.items():
        kept = []
        for item in items:
            if item.type in BOOTSTRAP_TYPES:
                author = item.author or "import"
                held[author] = held.get(author, 0) + 1
            else:
                kept.append(item)
        batches[name] = kept
    return held


def _say_held_back(held: dict[str, int], command: str, source) -> None:
    if held:
        whose = ", ".join(f"{count} of {author}" for author, count in sorted(held.items()))
        count = sum(held.values())
        click.echo(f"left out {count} identity or directive {'entry' if count == 1 else 'entries'} ({whose}): "
                   "they would be pinned "
                   "into those agents' sessions as their own voice. If you trust this source (an export of your own "
                   f"store), import it again with {KEEP_IDENTITIES}: `{command} {KEEP_IDENTITIES} {source}` (what is "
                   "already imported is skipped).")


def _restore_links(col, fields: dict[str, dict]) -> int:
    """Give the memories just imported their supersedes links, link history and feedback, as exported: one log
    append per memory, after every memory of the file is stored (a link may name one stored after it)."""
    return sum(col.restore_lifecycle(memory_id, supersedes=wanted["supersedes"], link_history=wanted["link_history"],
                                     feedback=wanted["feedback"]) for memory_id, wanted in fields.items())


@memory.command()
@click.option("--dry-run", is_flag=True, help="Only list the clusters that would be consolidated; write nothing.")
@click.option("--collection", default=None, help="Only this collection (default: every shared collection).")
@click.option("--project", default=None, help="Only this project's memories.")
@click.option("--json", "as_json", is_flag=True, help="Print each collection's report as one line of JSON.")
def consolidate(dry_run: bool, collection: str | None, project: str | None, as_json: bool) -> None:
    """Gather mature clusters of similar memories into consolidated memories (extractive; members are kept and
    stay searchable; nothing is deleted). Every author's memories, each author's and project's clustered apart.
    Private collections (session turns) are never consolidated."""
    from .lifecycle.consolidation import consolidate as run
    from .permissions import is_private
    from .store.query import did_you_mean

    service = _open("consolidate", "or, without stopping it, let it consolidate when idle ([memory] "
                                   "consolidate_every_hours), or call memory_consolidate (each agent's own memories).")
    try:
        names = sorted(service.collections())
        if collection is not None and collection not in names:
            raise click.ClickException(did_you_mean("collection", collection, names))
        if collection is not None and is_private(service.config, collection):
            raise click.ClickException(f"collection {collection!r} is private (session turns): it is never "
                                       "consolidated.")
        for name in names:
            if collection not in (None, name) or is_private(service.config, name):
                continue
            try:
                report = run(service.collection(name), service.config, project=project, dry_run=dry_run)
            except UserError as exc:
                raise click.ClickException(str(exc)) from None
            if as_json:
                click.echo(json.dumps(report.to_dict(), ensure_ascii=False))
                continue
            for cluster in report.clusters:
                if cluster.action == "unchanged":
                    continue
                members = (f"{len(cluster.members)} members" if cluster.action == "create" else
                           f"{len(cluster.members)} members, {len(cluster.new_members)} new")
                click.echo(f"{'would ' if dry_run else ''}{cluster.action} {cluster.id} (project {cluster.project}, "
                           f"by {cluster.author}, {members}): {' '.join(cluster.new_members)}")
                for line in cluster.preview.splitlines()[1:4]:  # its first statements
                    click.echo(f"    {line[:160]}")
            click.echo(report.summary())
    finally:
        service.stop()


@memory.command()
@click.argument("query")
@click.option("--limit", default=5, show_default=True, type=click.IntRange(1, 50), help="Most results.")
@click.option("--project", default="", help="Only this project's memories.")
@click.option("--collection", default="memories", show_default=True, help="The collection searched.")
@click.option("--agent", envvar="PERSMEM_AGENT", default=None,
              help="Search as this agent sees the store (default: [server] default_agent). Env PERSMEM_AGENT.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as one JSON list.")
def search(query: str, limit: int, project: str, collection: str, agent: str | None, as_json: bool) -> None:
    """Search memories by meaning and keywords, as memory_search does: through the running server, or holding
    the home for the search when none runs. A hit a line: id, score, project/type, the start of its text."""
    from persmem_core.sdk import get_host, served_agent

    from .cli_search import lines, search as run

    host = get_host()
    if agent is not None:
        served_agent(host, agent)  # an unknown or revoked agent is refused before the store is opened
    reply = run(host, {"query": query, "top_k": limit, "project": project, "collection": collection}, agent)
    if as_json:
        click.echo(json.dumps(reply.get("results", []), ensure_ascii=False))
        return
    for line in lines(reply):
        click.echo(line)


@memory.command("import-chroma")
@click.argument("path", type=click.Path(exists=True, path_type=Path, file_okay=False))
@click.option("--collection", "chroma_collection", default=None, help="Only this ChromaDB collection.")
@click.option("--keep-identity-entries", "keep_identities", is_flag=True,
              help="Also import identity and directive entries under the authors the store names (pinned into "
                   "each author's sessions as its own voice: only for a store you trust).")
def import_chroma(path: Path, chroma_collection: str | None, keep_identities: bool) -> None:
    """Import a persMEM ChromaDB store (the folder holding chroma.sqlite3): documents, metadata and ids.
    Identity and directive entries are left out unless --keep-identity-entries says the store is trusted."""
    from .chroma_import import read_chroma_store

    service = _open("import-chroma", _IMPORT_WHILE_RUNNING)
    try:
        batches = read_chroma_store(path, only=chroma_collection)
        held = _hold_back_identities(batches, keep_identities)
        _store_batches(service, batches, author="import")
        _say_held_back(held, "persmem memory import-chroma", path)
    finally:
        service.stop()


def _store_batches(service, batches: dict[str, list], author: str) -> dict[str, set[str]]:
    """Store each collection's items, skipping ids already present (left as they are). Returns the ids stored,
    by collection."""
    stored: dict[str, set[str]] = {}
    for name, items in batches.items():
        col = service.collection(name, create=True)
        todo = [item for item in items if item.memory_id not in col.memories]
        ids = stored.setdefault(name, set())
        for start in range(0, len(todo), 500):
            results = col.store(todo[start : start + 500], author=author, dedup=False)
            ids.update(r["id"] for r in results if r["status"] == "stored")
        skipped = len(items) - len(todo)
        click.echo(f"{name}: imported {len(ids)}, skipped {skipped} already present"
                   + (" (their links, feedback and history left as they are)" if skipped else ""))
    return stored
