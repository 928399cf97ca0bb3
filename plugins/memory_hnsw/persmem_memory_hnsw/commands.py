"""`persmem memory ...`: maintenance commands that work on the store directly.

They take the store's owner lock, so they refuse to run while a server is
serving the same data (stop it first, or use the MCP tools).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click


def _open():
    """The store, locked and loaded, for this command's length (stop it when done)."""
    from persmem_core.cli import get_host

    from .service import open_service

    return open_service(get_host())


@click.group()
def memory() -> None:
    """Memory store maintenance: stats, reindex, export/import JSONL, import a persMEM ChromaDB store."""


@memory.command()
@click.option("--collection", default=None, help="Only this collection.")
def stats(collection: str | None) -> None:
    """Print counts per collection."""
    service = _open()
    try:
        for name, col in sorted(service.collections().items()):
            if collection in (None, name):
                click.echo(json.dumps(col.stats(), indent=2))
    finally:
        service.stop()


@memory.command()
def reindex() -> None:
    """Re-embed every memory with the configured embedder (after changing models) and rebuild the index."""
    from persmem_core.cli import get_host

    from .service import new_service

    service = new_service(get_host())
    try:
        service.lock()  # the store's owner lock: refused while a server serves the same data
        for name, count in service.reindex():
            click.echo(f"{name}: re-embedded {count} memories with {service.embedder.model_id}")
    finally:
        service.stop()


@memory.command("export")
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--collection", default=None, help="Only this collection (default: all).")
def export_(path: Path, collection: str | None) -> None:
    """Write every memory (with its history) as JSON Lines to PATH ('-' for stdout)."""
    from .records import public

    service = _open()
    try:
        out = sys.stdout if str(path) == "-" else open(path, "w", encoding="utf-8")
        count = 0
        for name, col in sorted(service.collections().items()):
            if collection not in (None, name):
                continue
            for head in sorted(col.memories.values(), key=lambda m: m.created):
                memory = col.get(head.id)
                record = public(memory)
                record["created_ts"], record["updated_ts"] = memory.created, memory.updated
                if memory.context:
                    record["context"] = memory.context
                out.write(json.dumps(record, ensure_ascii=False) + "\n")
                count += 1
        if out is not sys.stdout:
            out.close()
        click.echo(f"exported {count} memories", err=True)
    finally:
        service.stop()


@memory.command("import")
@click.argument("path", type=click.Path(exists=True, path_type=Path, dir_okay=False))
def import_(path: Path) -> None:
    """Import memories from a JSON Lines file written by `persmem memory export` (ids, authors, times kept)."""
    from .collection import NewMemory

    service = _open()
    try:
        batches: dict[str, list] = {}
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    rec = json.loads(line)
                    context = rec.get("context") or ""
                    if not isinstance(context, str):
                        raise TypeError(f"context must be a string, not {type(context).__name__}")
                    item = NewMemory(content=rec["content"], project=rec.get("project", "general"),
                                     type=rec.get("type", "session_note"), tags=list(rec.get("tags", [])),
                                     memory_id=rec.get("id"), author=rec.get("author"), created=rec.get("created_ts"),
                                     context=context)
                except (json.JSONDecodeError, KeyError, TypeError) as exc:
                    raise click.ClickException(f"{path}:{number}: not a memory record ({exc}).") from None
                batches.setdefault(rec.get("collection", "memories"), []).append(item)
        _store_batches(service, batches, author="import")
    finally:
        service.stop()


@memory.command("import-chroma")
@click.argument("path", type=click.Path(exists=True, path_type=Path, file_okay=False))
@click.option("--collection", "chroma_collection", default=None, help="Only this ChromaDB collection.")
def import_chroma(path: Path, chroma_collection: str | None) -> None:
    """Import a persMEM ChromaDB store (the folder holding chroma.sqlite3): documents, metadata and ids."""
    from .chroma_import import read_chroma_store

    service = _open()
    try:
        batches = read_chroma_store(path, only=chroma_collection)
        _store_batches(service, batches, author="import")
    finally:
        service.stop()


def _store_batches(service, batches: dict[str, list], author: str) -> None:
    for name, items in batches.items():
        col = service.collection(name)
        todo = [item for item in items if item.memory_id not in col.memories]
        stored = 0
        for start in range(0, len(todo), 500):
            results = col.store(todo[start : start + 500], author=author, dedup=False)
            stored += sum(r["status"] == "stored" for r in results)
        click.echo(f"{name}: imported {stored}, skipped {len(items) - len(todo)} already present")
