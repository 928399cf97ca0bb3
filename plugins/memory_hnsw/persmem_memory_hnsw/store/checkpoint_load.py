"""Loading a collection's checkpoint (checkpoint.py: the format) into empty rows and vectors, when it fits this
log, model and format: its sidecar checked, the file read whole and verified, unsealed in memory, then decoded.
Anything that does not fit is logged and ignored (the caller replays the whole log).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
from array import array
from pathlib import Path

import msgspec
import numpy as np

from persmem_core.sdk import Sealer, SealingError

from .checkpoint import (FORMAT, LENGTH, MAGIC, PURPOSE, ROWS_ARRAYS, CheckpointMeta, State, checkpoint_path, meta_path,
                         prefix_crc)
from .lexical import BM25Index
from .records import Head
from .rows import Codes, Rows
from .vectors import VectorIndex

log = logging.getLogger("persmem.memory")

_state_decoder = msgspec.msgpack.Decoder(State)


class Loaded(msgspec.Struct):
    log_offset: int
    log_crc32: int  # of the log's bytes up to log_offset (checked): where the log's running CRC starts
    dead_bytes: int
    timings: dict[str, float]


def load(folder: Path, rows: Rows, vectors: VectorIndex, log_path: Path, *, model_id: str,
         sealer: Sealer | None) -> Loaded | None:
    """Fill the empty `rows` and `vectors` (its int8 copy) from the checkpoint, if there is one that fits this
    log, model and format; None otherwise (logged; then replay the whole log). SealingError (naming the file)
    when it is sealed under a key that is not on hand, as for the index."""
    path = checkpoint_path(folder)
    timings: dict[str, float] = {}
    clock = time.perf_counter()
    try:
        meta = msgspec.json.decode(meta_path(path).read_bytes(), type=CheckpointMeta)
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        log.warning("%s: sidecar unreadable (%s); replaying the whole log", path, exc)
        return None
    try:
        log_size = os.path.getsize(log_path)
    except FileNotFoundError:
        log_size = 0
    if meta.format != FORMAT or meta.model_id != model_id or meta.dim != vectors.dim or meta.log_offset > log_size:
        log.warning("%s: made for another format, model or a longer log; replaying the whole log", path)
        return None
    if prefix_crc(log_path, meta.log_offset) != meta.log_crc32:
        log.warning("%s: made from another log, or the log changed before offset %d; replaying the whole log",
                    path, meta.log_offset)
        return None
    try:
        with open(path, "rb") as f:
            stored = bytearray(os.fstat(f.fileno()).st_size)
            got = f.readinto(stored)
    except OSError as exc:
        log.warning("%s: unreadable (%s); replaying the whole log", path, exc)
        return None
    if got != len(stored) or hashlib.sha256(stored).hexdigest() != meta.sha256:
        log.warning("%s: checksum mismatch; replaying the whole log", path)
        return None
    timings["read"] = time.perf_counter() - clock
    clock = time.perf_counter()
    try:  # decrypted straight into one buffer; a plaintext checkpoint comes back as a view of `stored`
        data = (sealer or Sealer.plain()).open_buffer(stored, PURPOSE)
    except SealingError as exc:
        raise SealingError(f"{path}: {exc}") from None
    del stored
    timings["unseal"] = time.perf_counter() - clock
    try:
        return _fill(data, meta, rows, vectors, timings)
    except (msgspec.DecodeError, msgspec.ValidationError, ValueError, KeyError, IndexError, TypeError) as exc:
        log.warning("%s: does not decode (%s); replaying the whole log", path, exc)
        return None


def _fill(data: memoryview, meta: CheckpointMeta, rows: Rows, vectors: VectorIndex,
          timings: dict[str, float]) -> Loaded:
    clock = time.perf_counter()
    state, body = _decode_state(data, meta)
    timings["decode"] = time.perf_counter() - clock
    clock = time.perf_counter()
    arrays = _read_arrays(data, body, state)
    del data
    if arrays["_q"].shape[1:] != (vectors.dim,):
        raise ValueError("vectors of another dimension")
    timings["arrays"] = time.perf_counter() - clock
    clock = time.perf_counter()
    fields = _rows_fields(state, arrays)
    timings["rows"] = time.perf_counter() - clock
    clock = time.perf_counter()
    fields["lexical"] = _bm25(state, arrays)
    timings["bm25"] = time.perf_counter() - clock
    for name, value in fields.items():
        setattr(rows, name, value)
    vectors._q, vectors._scale = arrays["_q"], arrays["_scale"]
    return Loaded(log_offset=meta.log_offset, log_crc32=meta.log_crc32, dead_bytes=state.dead_bytes, timings=timings)


def _decode_state(data: memoryview, meta: CheckpointMeta) -> tuple[State, int]:
    """The State, and where the array section starts; ValueError when it is not the checkpoint `meta` vouches for."""
    if bytes(data[: len(MAGIC)]) != MAGIC:
        raise ValueError("not a checkpoint")
    (length,) = LENGTH.unpack_from(data, len(MAGIC))
    start = len(MAGIC) + LENGTH.size
    state = _state_decoder.decode(data[start : start + length])
    if (state.format, state.model_id, state.dim, state.log_offset) != (meta.format, meta.model_id, meta.dim,
                                                                        meta.log_offset):
        raise ValueError("the checkpoint and its sidecar disagree")
    return state, start + length


def _read_arrays(data: memoryview, body: int, state: State) -> dict[str, np.ndarray]:
    """Every stored array, copied out of `data` into arrays of its full capacity (the spare rows zeros)."""
    arrays = {}
    for info in state.arrays:
        dtype = np.dtype(info.dtype)
        shape = tuple(info.shape)
        if info.used > shape[0] or body + info.offset + info.nbytes > len(data):
            raise ValueError(f"array {info.name} does not fit the file")
        values = np.zeros(shape, dtype=dtype)  # spare rows stay untouched, as np.zeros capacity does
        stored = np.frombuffer(data, dtype=dtype, count=info.nbytes // dtype.itemsize, offset=body + info.offset)
        values[: info.used] = stored.reshape((info.used, *shape[1:]))
        arrays[info.name] = values
    return arrays


def _rows_fields(state: State, arrays: dict[str, np.ndarray]) -> dict:
    """The Rows attributes (all but `lexical`): heads given back their strings and tags, the indexes made again."""
    strings = {s: s for s in state.strings}  # one copy of each project, type, author and tag, as head_of shares
    named = list(strings)
    projects, types, authors = (list(code) for code in (state.projects, state.types, state.authors))
    for codes, values in ((state.projects, projects), (state.types, types), (state.authors, authors)):
        if list(codes.values()) != list(range(len(codes))):
            raise ValueError("codes out of order")
        values[:] = [strings.get(value, value) for value in values]
    at_row = state.at_row
    project_of, type_of, author_of = (arrays[name][: len(at_row)].tolist() for name in ("project", "type", "author"))
    tag_counts, tag_ids = arrays["tag_counts"].tolist(), arrays["tag_ids"].tolist()
    heads: dict[str, Head] = {}
    row_of: dict[str, int] = {}
    at = 0
    for row, head in enumerate(at_row):
        if head is None:
            continue
        head.project, head.type, head.author = projects[project_of[row]], types[type_of[row]], authors[author_of[row]]
        count = tag_counts[row]
        if count:
            head.tags = tuple([named[i] for i in tag_ids[at : at + count]])
            at += count
        heads[head.id] = head
        row_of[head.id] = row
    by_hash = dict(zip(arrays["by_hash_keys"].tolist(), [at_row[r].id for r in arrays["by_hash_rows"].tolist()]))
    by_hash.update(state.by_hash_other)
    return {
        "heads": heads, "row_of": row_of, "at_row": at_row, "by_hash": by_hash,
        "tag_rows": state.tag_rows, "next_label": state.next_label, "applied_seq": state.applied_seq,
        "unembedded": state.unembedded,
        "successor_of": state.successor_of, "consolidated_into": state.consolidated_into,
        "_successors": state.successors, "_consolidators": state.consolidators, "undone_links": state.undone_links,
        "projects": _codes(state.projects), "types": _codes(state.types), "authors": _codes(state.authors),
        "_strings": strings, **{name: arrays[name] for name in ROWS_ARRAYS},
    }


def _bm25(state: State, arrays: dict[str, np.ndarray]) -> BM25Index:
    """The BM25 index as saved; its per-scope statistics counted again for a checkpoint from before they were kept."""
    lexical = BM25Index()
    lexical._term_id = dict(zip(state.terms, range(len(state.terms))))
    lexical._offsets, lexical._rows, lexical._tfs = arrays["_offsets"], arrays["_rows"], arrays["_tfs"]
    lexical._delta = {tid: (array("i", r), array("f", t)) for tid, (r, t) in state.delta.items()}
    lexical._delta_size, lexical.n_alive, lexical.total_len = state.delta_size, state.n_alive, state.total_len
    lexical._doc_len = array("f", arrays["_doc_len"].tobytes())
    lexical._alive = bytearray(arrays["_alive"].tobytes())
    if len(lexical._doc_len) > len(arrays["author"]):
        raise ValueError("BM25 rows do not fit the rows")
    scopes = arrays["author"][: len(lexical._doc_len)].astype(np.int32)
    lexical._scope = array("i", scopes.tobytes())
    if state.scope_alive is None or state.scope_len is None:  # an older checkpoint: count them
        alive = np.frombuffer(lexical._alive, dtype=np.uint8).astype(bool)
        live = scopes[alive]
        counts = np.bincount(live)
        lengths = np.bincount(live, weights=np.frombuffer(lexical._doc_len, dtype=np.float32)[alive])
        lexical.scope_alive = {s: int(counts[s]) for s in np.flatnonzero(counts).tolist()}
        lexical.scope_len = {s: float(lengths[s]) for s in lexical.scope_alive}
    else:
        lexical.scope_alive, lexical.scope_len = state.scope_alive, state.scope_len
    offsets = lexical._offsets
    if len(offsets) > len(state.terms) + 1 or (len(offsets) and offsets[-1] != len(lexical._rows)):
        raise ValueError("BM25 postings do not fit their terms")
    return lexical


def _codes(code: dict[str, int]) -> Codes:
    codes = Codes()
    codes.code = code
    return codes
