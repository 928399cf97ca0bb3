"""The secrets of a local NATS cluster (local_cluster.py): which users may connect and what each may do.

Every persmem node gets a user of its own, an nkey whose seed is kept in a 0600 file, allowed only persmem's
subjects and the JetStream API calls its plugins make on persmem's streams (`node_permissions`); `ADMIN` may do
anything. `write_private` is how every secret of the cluster (seeds, keys, configs with the route password) is
written. `persmem cluster user NAME` uses the same pieces for a cluster run by a service manager.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from persmem_core.errors import UserError
from persmem_core.fileio import atomic_write_bytes

ADMIN = "admin"  # the user allowed everything (an operator's `nats` tool, tests that make streams of their own)

# The JetStream streams persmem's plugins keep (plugins/amq_nats: mail and its claims bucket; memory_hnsw
# replication.py: memory and its snapshot bucket) and the subjects they publish to; a node's user may use these only.
PERSMEM_STREAMS = ("PERSMEM_AMQ", "KV_persmem_amq_claims", "PERSMEM_MEMORY", "OBJ_persmem_memory_snapshots")
PERSMEM_SUBJECTS = ("persmem.amq.>", "persmem.memory.>", "$KV.persmem_amq_claims.>", "$O.persmem_memory_snapshots.>")


def node_permissions() -> dict:
    """The NATS permissions of a persmem node's user: publish to persmem's subjects, the JetStream API calls its
    plugins make on persmem's streams (find or create, read, follow, direct get; no delete, and purge only of the
    snapshot bucket, which replacing a snapshot does), flow control; subscribe only to its own replies and consumer
    deliveries (_INBOX). Nothing else: no other stream, no `$SYS`, no plain subscription to `persmem.>`."""
    publish = [*PERSMEM_SUBJECTS, "$JS.API.INFO", "$JS.API.STREAM.NAMES", "$JS.API.STREAM.LIST", "$JS.FC.>",
               "$JS.ACK.>", "$JS.API.STREAM.PURGE.OBJ_persmem_memory_snapshots"]
    for stream in PERSMEM_STREAMS:
        publish += [f"$JS.API.STREAM.{verb}.{stream}" for verb in ("CREATE", "UPDATE", "INFO", "MSG.GET")]
        publish += [f"$JS.API.DIRECT.GET.{stream}", f"$JS.API.DIRECT.GET.{stream}.>",
                    f"$JS.API.CONSUMER.CREATE.{stream}", f"$JS.API.CONSUMER.CREATE.{stream}.>",
                    f"$JS.API.CONSUMER.DELETE.{stream}.*", f"$JS.API.CONSUMER.INFO.{stream}.*"]
    return {"publish": {"allow": publish}, "subscribe": {"allow": ["_INBOX.>"]}}


def new_nkey_seed() -> tuple[bytes, str]:
    """A new NATS user nkey: (seed, as written to a seed file; public key, as a server's `users` entry names it)."""
    try:
        import nkeys
    except ImportError:
        raise UserError("making NATS credentials needs the nkeys package: pip install 'persmem[cluster]'.") from None
    seed = nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER)
    return seed, nkeys.from_seed(bytearray(seed)).public_key.decode()


def nkey_public(seed_file: Path) -> str:
    """The public key of the seed in `seed_file`."""
    import nkeys

    return nkeys.from_seed(bytearray(Path(seed_file).read_bytes().strip())).public_key.decode()


def write_private(path: Path, data: bytes) -> None:
    """`data` at `path`, mode 0600, in a folder only we may enter (0700); never through a link."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    atomic_write_bytes(path, data, mode=0o600)


def nkey_user_entry(public: str, permissions: dict | None) -> str:
    """One `authorization.users` entry of a NATS server config: the user's public nkey and its permissions (None:
    everything)."""
    entry = {"nkey": public}
    if permissions is not None:
        entry["permissions"] = permissions
    return json.dumps(entry)

