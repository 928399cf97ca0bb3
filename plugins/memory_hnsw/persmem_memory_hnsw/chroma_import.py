"""Reading a persMEM ChromaDB store without the chromadb package.

ChromaDB (0.5 - 1.x) keeps documents and metadata in `chroma.sqlite3`:
`collections` -> `segments` (scope METADATA) -> `embeddings` (one row per
record, `embedding_id` is the user's id) -> `embedding_metadata` (key/value
rows; the document is the key `chroma:document`). Vectors are not needed:
persmem re-embeds with its own model.

persMEM's metadata keys map to persmem fields: project, tags (comma
string), type / memory_type, author / agent, timestamp / created_at.
Labels (project, type, tags, author) are made one line of visible text:
control and invisible characters become spaces (query.check_visible_label
would refuse them in a store; here there is no file to fix).
"""

from __future__ import annotations

import sqlite3
from datetime import datetime, timezone
from pathlib import Path

from persmem_core.sdk import UserError, control_characters

from .collection import NewMemory
from .store.records import ID_RE


def _time(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value) / (1000.0 if value > 1e11 else 1.0)
    try:
        parsed = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=timezone.utc)).timestamp()


def _label(value, default: str) -> str:
    """A metadata value as a label: one line of visible text, at most 64 characters, else `default`."""
    text = str(value)
    hidden = set(control_characters(text))
    text = "".join(" " if c in hidden else c for c in text)
    return " ".join(text.split())[:64].strip() or default


def _collection_name(name: str) -> str:
    cleaned = "".join(c if c.isalnum() or c in "_-" else "_" for c in name.lower()).strip("_-") or "memories"
    return cleaned[:64]


def read_chroma_store(path: Path, only: str | None = None) -> dict[str, list[NewMemory]]:
    db = Path(path) / "chroma.sqlite3"
    if not db.exists():
        raise UserError(f"{db} not found: pass the folder a ChromaDB PersistentClient wrote (it holds chroma.sqlite3).")
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        collections = conn.execute("SELECT id, name FROM collections").fetchall()
        out: dict[str, list[NewMemory]] = {}
        for collection_id, name in collections:
            if only is not None and name != only:
                continue
            rows = conn.execute(
                """SELECT e.id, e.embedding_id, m.key, m.string_value, m.int_value, m.float_value, m.bool_value
                   FROM embeddings e JOIN segments s ON e.segment_id = s.id
                   LEFT JOIN embedding_metadata m ON m.id = e.id
                   WHERE s.collection = ? AND s.scope = 'METADATA' ORDER BY e.id""",
                (collection_id,),
            ).fetchall()
            records: dict[int, dict] = {}
            for row_id, record_id, key, s_val, i_val, f_val, b_val in rows:
                record = records.setdefault(row_id, {"id": record_id, "meta": {}})
                if key is not None:
                    record["meta"][key] = next((v for v in (s_val, i_val, f_val, b_val) if v is not None), None)
            items = []
            for record in records.values():
                meta = record["meta"]
                document = meta.pop("chroma:document", None)
                if not document:
                    continue
                tags = meta.get("tags") or ""
                items.append(NewMemory(
                    content=document,
                    project=_label(meta.get("project") or "general", "general"),
                    type=_label(meta.get("type") or meta.get("memory_type") or "session_note", "session_note"),
                    tags=list(dict.fromkeys(tag for tag in (_label(t, "") for t in str(tags).split(",")) if tag)),
                    memory_id=record["id"] if ID_RE.match(record["id"] or "") else None,
                    author=_label(meta.get("author") or meta.get("agent") or "import", "import"),
                    created=_time(meta.get("timestamp") or meta.get("created_at") or meta.get("created")),
                ))
            out[_collection_name(name)] = items
        return out
    except sqlite3.DatabaseError as exc:
        raise UserError(f"{db}: not a ChromaDB store this importer understands ({exc}).") from None
    finally:
        conn.close()
