"""Where the mail is kept in NATS: the stream PERSMEM_AMQ (one subject per mailbox, its binding marker) and the
claims bucket persmem_amq_claims (one key per message); making them when they are missing, and what `persmem
doctor` says of them. jetstream.py delivers, claims and reads through them.
"""

from __future__ import annotations

import logging
import re

import nats.js.api as api
import nats.js.errors

from persmem_core.sdk import NatsLink, stream_problems

log = logging.getLogger("persmem.amq")

STREAM = "PERSMEM_AMQ"
PREFIX = "persmem.amq."
SUBJECTS = PREFIX + ">"
CLAIMS = "persmem_amq_claims"
MARKER = PREFIX + "_binding"  # where the stream's binding marker is (no mailbox is called that)
DUPLICATE_WINDOW = 120.0  # seconds JetStream remembers a message id (a retried publish is stored once)

BOX_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}")


def claim_key(box: str, name: str) -> str:
    """The claims-bucket key of a message: KV keys allow [-/_=.a-zA-Z0-9] and a dot splits subject tokens, so the
    name's dots become `=` (which no message name holds)."""
    return f"{box}/{name.replace('.', '=')}"


def parse_claim_key(key: str) -> tuple[str, str] | None:
    box, _, rest = key.partition("/")
    return (box, rest.replace("=", ".")) if BOX_RE.fullmatch(box) and rest else None


async def ensure_stream(js, replicas: int):
    """The mail stream's info, the stream made first if it is missing (nodes racing to make it make one)."""
    try:
        info = await js.stream_info(STREAM)
    except nats.js.errors.NotFoundError:
        info = await js.add_stream(api.StreamConfig(
            name=STREAM, description="persmem mail (AMQ): one message per delivery", subjects=[SUBJECTS],
            storage=api.StorageType.FILE, num_replicas=replicas, duplicate_window=DUPLICATE_WINDOW, allow_direct=True))
        log.info("amq: made the JetStream stream %s (replicas %d)", STREAM, replicas)
    if info.config.num_replicas != replicas:
        log.warning("amq: stream %s keeps %d replicas, [cluster] replicas says %d (nats stream edit %s --replicas)",
                    STREAM, info.config.num_replicas, replicas, STREAM)
    return info


async def ensure_claims(js, replicas: int):
    """The claims bucket, made first if it is missing."""
    try:
        return await js.key_value(CLAIMS)
    except nats.js.errors.BucketNotFoundError:
        return await js.create_key_value(api.KeyValueConfig(
            bucket=CLAIMS, description="persmem mail claims: who read each message first", history=1,
            storage=api.StorageType.FILE, replicas=replicas))


def check_stream(link: NatsLink, replicas: int) -> tuple[list[str], str]:
    """For doctor: (problems, summary) of the mail stream and the claims bucket: messages, replicas, leader, and
    replicas that are offline or behind."""

    async def look():
        js = link.js
        try:
            info = await js.stream_info(STREAM, subjects_filter=MARKER)
        except nats.js.errors.NotFoundError:
            return [], f"stream {STREAM} not made yet (the first persmem server on the cluster makes it)"
        problems = stream_problems(info, replicas)
        messages = info.state.messages - sum((info.state.subjects or {}).values())  # deliveries, not markers
        cluster = info.cluster
        try:
            claims = (await js.stream_info(f"KV_{CLAIMS}")).state.messages
        except nats.js.errors.NotFoundError:
            claims = 0
        leader = cluster.leader if cluster else None
        return problems, (f"stream {STREAM}: {messages} message(s), {claims} claimed, replicas "
                          f"{info.config.num_replicas}" + (f", leader {leader}" if leader else ""))

    return link.run(look())
