"""Snapshots of the collections for new nodes: a node puts a collection's files in the object store
`persmem_memory_snapshots` as one tar (sealed as a whole with its collection and the sequence it reaches), and a new
node (a collection folder without a log) starts from the newest one and follows the stream from there. A snapshot
that does not open as that collection's is not used (the node replays the stream instead).

`ReplicationSnapshots` is the snapshot half of `Replication` (replication.py), which it is mixed into: it uses
that class's link, sealer, timeout and `_run`.
"""

from __future__ import annotations

import logging
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from persmem_core.sdk import SealingError, UserError, bound_purpose, is_sealed

log = logging.getLogger("persmem.memory")

SNAPSHOTS = "persmem_memory_snapshots"  # object store bucket: one object per collection, its newest snapshot
SNAPSHOT_KIND = b"persmem.memory.snapshot"  # a snapshot, sealed with its collection and the sequence it reaches
SNAPSHOT_FILES = ("records.log", "vectors.hnsw", "vectors.hnsw.meta.json", "checkpoint.bin", "checkpoint.bin.meta.json",
                  "model.json")


class ReplicationSnapshots:
    """Publishing and restoring snapshots of collections (mixed into Replication)."""

    def snapshot_seq(self, collection: str) -> int:
        """The stream sequence the collection's newest snapshot reaches (0: there is none)."""
        from nats.js.errors import NotFoundError, ObjectNotFoundError

        async def _info():
            try:
                return await (await self.link.js.object_store(SNAPSHOTS)).get_info(collection)
            except (NotFoundError, ObjectNotFoundError):
                return None

        info = self._run(_info, "read the snapshot's sequence")
        return 0 if info is None else _applied_seq(info.headers)

    def publish_snapshot(self, collection: str, files: dict[str, tuple[object, int]], applied_seq: int, *,
                         newer_than: int) -> bool:
        """Put the collection's files (name -> (open binary file, bytes to copy)) in the object store as one tar,
        marked with the sequence they reach, unless another node put one after `newer_than` (this node's previous
        snapshot): then that one serves, and this node waits for its next turn. The tar is spooled through a
        temporary file, not memory. The files are closed. Returns whether it put."""
        from nats.js.api import ObjectMeta

        try:
            if self.snapshot_seq(collection) > newer_than:  # another node put one since this node's last
                return False
            with tempfile.TemporaryFile() as plain, tempfile.TemporaryFile() as spool:
                with tarfile.open(fileobj=plain, mode="w") as tar:
                    for name, (f, size) in files.items():
                        info = tarfile.TarInfo(name)
                        info.size = size
                        tar.addfile(info, f)
                plain.seek(0)  # sealed as a whole, for this collection and this sequence (plain without a key)
                self.sealer.seal_stream(plain, spool, bound_purpose(SNAPSHOT_KIND, collection, applied_seq))
                size = spool.tell()
                meta = ObjectMeta(name=collection, description=f"applied_seq {applied_seq}",
                                  headers={"Persmem-Applied-Seq": str(applied_seq)})

                async def _put():
                    spool.seek(0)
                    return await (await self.link.js.object_store(SNAPSHOTS)).put(collection, spool, meta=meta)

                self._run(_put, "publish a snapshot", timeout=max(60.0, self.timeout))
        finally:
            for f, _ in files.values():
                f.close()
        log.info("memory: snapshot of %s at sequence %d published (%d bytes)", collection, applied_seq, size)
        return True

    def restore_snapshot(self, collection: str, folder: Path) -> int:
        """Write the collection's newest snapshot into the empty `folder`; returns the sequence it reaches (0 and
        nothing written when there is none). Read through a temporary file; tried again if it changes meanwhile."""
        from nats.js.errors import NotFoundError, ObjectNotFoundError

        for attempt in range(3):
            with tempfile.TemporaryFile() as spool:
                async def _get():
                    spool.seek(0)
                    spool.truncate()
                    try:
                        return await (await self.link.js.object_store(SNAPSHOTS)).get(collection, writeinto=spool)
                    except (NotFoundError, ObjectNotFoundError):
                        return None

                try:
                    got = self._run(_get, "read a snapshot", timeout=max(60.0, self.timeout))
                except Exception as exc:  # noqa: BLE001 - another node replacing it: read the new one
                    if attempt == 2:
                        raise
                    log.warning("memory: reading the snapshot of %s failed (%s); trying again", collection, exc)
                    continue
                if got is None or not spool.tell():
                    return 0
                applied_seq = _applied_seq(got.info.headers)
                spool.seek(0)
                plain = self._open_snapshot(collection, spool, applied_seq)
                if plain is None:
                    return 0
                folder.mkdir(parents=True, exist_ok=True)
                with plain, tarfile.open(fileobj=plain, mode="r") as tar:
                    for member in tar.getmembers():
                        if member.name not in SNAPSHOT_FILES or not member.isfile():
                            raise UserError(f"the snapshot of {collection!r} holds {member.name!r}, which is not a "
                                            "collection file; nothing was written from it. Remove the snapshot (nats "
                                            f"object rm {SNAPSHOTS} {collection}) and restart.")
                        with open(folder / member.name, "wb") as out:
                            shutil.copyfileobj(tar.extractfile(member), out, 1 << 20)
                            out.flush()
                            os.fsync(out.fileno())
                return applied_seq
        return 0

    def _open_snapshot(self, collection: str, spool, applied_seq: int):
        """The snapshot's tar (a temporary file, at its start) once it opens as this collection's at `applied_seq`;
        None (logged) when it does not: the collection then starts from the stream's first write instead."""
        plain = tempfile.TemporaryFile()
        head = spool.read(4)
        spool.seek(0)
        if self.sealer.enabled and not is_sealed(head):
            log.warning("memory: the snapshot of %s is not sealed (an earlier persmem's, or not a node's): not used; "
                        "the collection is built from the memory stream instead", collection)
            plain.close()
            return None
        try:
            self.sealer.open_stream(spool, plain, bound_purpose(SNAPSHOT_KIND, collection, applied_seq))
        except SealingError as exc:
            log.error("memory: the snapshot of %s does not open as this collection's at sequence %d (%s): not used; "
                      "the collection is built from the memory stream instead", collection, applied_seq, exc)
            plain.close()
            return None
        plain.seek(0)
        return plain


def _applied_seq(headers) -> int:
    """The Persmem-Applied-Seq header of a snapshot (nats-py gives header values as strings or lists)."""
    value = (headers or {}).get("Persmem-Applied-Seq", "0")
    value = value[0] if isinstance(value, list) else value
    return int(value) if str(value).isdigit() else 0
