"""What `persmem doctor` says about the NATS cluster: servers that let anyone in, servers across a network reached
without TLS, frames left unsealed (encryption off), and streams whose replicas are too few, offline or behind.
"""

from __future__ import annotations

import json
import socket
from urllib.parse import urlsplit

from persmem_core.cluster.nats_access import connect_options
from persmem_core.errors import UserError
from persmem_core.net.addresses import is_loopback
from persmem_core.settings import ClusterConfig


def stream_problems(info, replicas: int) -> list[str]:
    """What doctor warns about in a JetStream stream's info (nats-py's StreamInfo): another number of replicas than
    [cluster] `replicas`, and replicas that are offline or behind."""
    name = info.config.name
    problems = []
    if info.config.num_replicas != replicas:
        problems.append(f"stream {name} keeps {info.config.num_replicas} replica(s), [cluster] replicas says "
                        f"{replicas}")
    for peer in (info.cluster.replicas or []) if info.cluster else []:
        if peer.offline or not peer.current:
            problems.append(f"replica {peer.name} is {'offline' if peer.offline else 'behind'}")
    return problems


def server_info(url: str, timeout: float = 2.0) -> dict:
    """The INFO a NATS server greets every client with (before any credentials): auth_required, tls_required, ...
    OSError when it does not answer."""
    parts = urlsplit(url if "://" in url else f"nats://{url}")
    with socket.create_connection((parts.hostname, parts.port or 4222), timeout=timeout) as sock:
        sock.settimeout(timeout)
        line = b""
        while not line.endswith(b"\n") and len(line) < 65536:
            chunk = sock.recv(4096)
            if not chunk:
                break
            line += chunk
    if not line.startswith(b"INFO "):
        raise OSError(f"{url} did not greet as a NATS server")
    return json.loads(line[5:].split(b"\r\n", 1)[0])


def doctor_checks(config: ClusterConfig, encryption_on: bool) -> list:
    """`persmem doctor`'s lines about the cluster connection: whether every server requires credentials and this node
    has private ones, whether servers across a network are reached with TLS, and whether frames are sealed and bound
    (encryption on)."""
    from persmem_core.checks import fail, pass_, warn

    checks = []
    open_servers, plain_remote, silent = [], [], []
    for url in config.servers:
        try:
            info = server_info(url)
        except (OSError, ValueError):
            silent.append(url)
            continue
        if not info.get("auth_required"):
            open_servers.append(url)
        host = urlsplit(url if "://" in url else f"nats://{url}").hostname or ""
        if not is_loopback(host) and not info.get("tls_required") and not url.startswith("tls://"):
            plain_remote.append(url)
    mine = config.credentials or config.nkey_file
    problem = None
    if mine:
        try:
            connect_options(config)
        except UserError as exc:
            problem = str(exc)
    if problem:
        checks.append(fail("cluster auth", problem))
    elif open_servers:
        checks.append(warn("cluster auth", f"{', '.join(open_servers)} let(s) clients in without credentials: anyone "
                           "who reaches them can read persmem's mail and memory streams and publish to them. Give "
                           "every NATS server an authorization block with one nkey user per persmem node "
                           "(docs/scale-out.md; `persmem cluster user NAME`), then set [cluster] nkey_file."))
    elif len(silent) == len(config.servers):
        checks.append(warn("cluster auth", f"no NATS server answered ({', '.join(silent)}): start them "
                           "(`persmem cluster status` tells more)."))
    elif not mine:
        checks.append(fail("cluster auth", "the NATS servers require credentials and [cluster] has none: set "
                           "nkey_file (or credentials) to this node's file."))
    else:
        checks.append(pass_("cluster auth", "every NATS server that answered requires credentials; this node has "
                            f"its own in {mine} (0600)" + (f"; not answering: {', '.join(silent)}" if silent else "")))
    remote = [u for u in config.servers if not is_loopback(urlsplit(u if "://" in u else f"nats://{u}").hostname or "")]
    if plain_remote:
        checks.append(warn("cluster tls", f"{', '.join(plain_remote)} is/are not on loopback and not reached with TLS: "
                           "whoever is on that network sees every frame's subject and size and can tamper with the "
                           "connection. Give the servers a tls block and use tls:// URLs with [cluster] tls_ca_file "
                           "(docs/scale-out.md)."))
    elif remote:
        checks.append(pass_("cluster tls", "the servers across the network are reached with TLS"
                            + (f" (CA {config.tls_ca_file})" if config.tls_ca_file else "")))
    if encryption_on:
        checks.append(pass_("cluster frames", "sealed with the home's key and bound to their subject, message id and "
                            "place; unsealed or moved frames are refused"))
    else:
        checks.append(warn("cluster frames", "[encryption] is off, so frames on NATS are plaintext and not bound to "
                           "their place: any client the servers let in can read them and forge mail and memories. Turn "
                           "[encryption] on (the same key on every node)."))
    return checks
