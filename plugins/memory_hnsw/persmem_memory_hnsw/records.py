"""The Memory record and the entries of the record log (msgspec, MessagePack on disk)."""

from __future__ import annotations

import hashlib
import re
import secrets
import time

import msgspec

ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_:.\-]{0,127}$")


class Version(msgspec.Struct, kw_only=True, array_like=True):
    """A previous version of a memory, kept when it is updated."""

    version: int
    content: str
    tags: list[str]
    type: str
    project: str
    author: str
    updated: float


class Memory(msgspec.Struct, kw_only=True):
    id: str
    content: str
    project: str
    type: str
    tags: list[str]
    author: str
    collection: str
    created: float
    updated: float
    version: int = 1
    content_hash: str = ""
    labels: list[int] = []  # vector-index labels of this memory's chunks
    history: list[Version] = []


class Put(msgspec.Struct, tag="put", kw_only=True):
    """The memory's current state, with its chunk vectors (float32, one row per label)."""

    memory: Memory
    vectors: bytes


class Delete(msgspec.Struct, tag="del", kw_only=True):
    id: str
    at: float
    by: str


Entry = Put | Delete


def content_hash(text: str) -> str:
    normalized = " ".join(text.split()).casefold()
    return hashlib.sha256(normalized.encode("utf-8")).hexdigest()


def new_id() -> str:
    """Time-ordered, unique: milliseconds in hex + 40 random bits."""
    return f"mem_{int(time.time() * 1000):012x}{secrets.token_hex(5)}"


def public(memory: Memory) -> dict:
    """The memory as tools return it (no internal fields)."""
    return {
        "id": memory.id,
        "content": memory.content,
        "project": memory.project,
        "type": memory.type,
        "tags": memory.tags,
        "author": memory.author,
        "collection": memory.collection,
        "created": iso(memory.created),
        "updated": iso(memory.updated),
        "version": memory.version,
        "content_hash": memory.content_hash,
    }


def iso(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int((ts % 1) * 1000):03d}Z"
