"""Before a server takes the memory store: are the keys its sealed files name on hand? Read from a few bytes of
each file (frame headers), writing nothing, so a server with the wrong key stops before it changes a byte."""

from __future__ import annotations

import os
from pathlib import Path

from persmem_core.sdk import HEADER_BYTES, Sealer, SealingError, missing_key_message, sealed_key_id

from .retrievals import USAGE_NAME
from .checkpoint import CHECKPOINT_NAME
from .log import HEADER, LOG_NAME, MAX_FRAME
from .replay import INDEX_NAME


def first_sealed_key(log_path: Path) -> str | None:
    """The key id of the first sealed frame of a record log (None when it holds none), from frame headers alone:
    reads up to that frame, not the whole log."""
    try:
        f = open(log_path, "rb")
    except FileNotFoundError:
        return None
    with f:
        while True:
            head = f.read(HEADER.size + HEADER_BYTES)
            if len(head) < HEADER.size:
                return None
            length, _ = HEADER.unpack_from(head, 0)
            if length > MAX_FRAME:
                return None  # a damaged tail: the replay deals with it
            found = sealed_key_id(head[HEADER.size : HEADER.size + length])
            if found is not None:
                return found
            f.seek(length - (len(head) - HEADER.size), os.SEEK_CUR)


def check_keys(collections: list[Path], sealer: Sealer) -> None:
    """SealingError, naming the file and the fix, when a collection's log, index or retrieval counts are sealed
    under a key that is not on hand (`collections`: their folders). Reads a few bytes of each file and writes nothing (no lock either), so a
    server with the wrong key stops before it changes a byte. (The full check is the replay itself.)"""
    for collection in collections:
        found = [(collection / LOG_NAME, first_sealed_key(collection / LOG_NAME))]
        for name in (INDEX_NAME, USAGE_NAME, CHECKPOINT_NAME):
            try:
                with open(collection / name, "rb") as f:
                    found.append((collection / name, sealed_key_id(f.read(HEADER_BYTES))))
            except FileNotFoundError:
                pass
        for path, key in found:
            if key is not None and key not in sealer.known_ids:
                raise SealingError(f"{path}: {missing_key_message(key, sealer.known_ids)}")
