"""`persmem cluster`: a local NATS JetStream cluster for trials (`up`), what the configured one reports (`status`),
and a persmem node's NATS user for a cluster of your own (`user`).

A production cluster runs nats-server under its own service manager (docs/scale-out.md); `up` is for trying
scale-out on one machine: it starts N nats-server processes (persmem_core/cluster/local_cluster.py) and keeps them until
Ctrl-C or SIGTERM. Either way the servers let in only clients with an nkey of theirs, each persmem node with its
own and only onto persmem's subjects and streams.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from pathlib import Path

import click

from persmem_core.errors import UserError


@click.group()
def cluster() -> None:
    """A local NATS JetStream cluster for trials, and the state of the configured one ([cluster] servers)."""


@cluster.command()
@click.option("--nodes", default=3, show_default=True, type=click.IntRange(1, 9),
              help="How many nats-server processes (3 keeps a quorum with one down).")
@click.option("--dir", "root", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where configs, stores and logs go (kept between runs). Default: <persmem home>/nats-cluster.")
@click.option("--port", default=4222, show_default=True, type=click.IntRange(0, 65535),
              help="Client port of the first node, the others following it; 0 picks free ports.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address the nodes listen on. Another than loopback turns TLS on (a CA made in --dir/tls).")
@click.option("--clients", default="node1,node2,node3", show_default=True,
              help="The persmem nodes that get a NATS user (an nkey seed file) each, comma-separated.")
@click.option("--tls/--no-tls", "tls", default=None,
              help="Speak TLS to clients and between servers. Default: on unless --host is loopback.")
def up(nodes: int, root: Path | None, port: int, host: str, clients: str, tls: bool | None) -> None:
    """Start a local NATS JetStream cluster and keep it running until Ctrl-C (or SIGTERM), then stop it.

    Only clients with credentials get in: each persmem node named in --clients has its own nkey (in --dir/auth,
    0600), allowed persmem's subjects and streams only; admin.nk there may do anything (the `nats` tool). Prints
    the [cluster] lines for each node's persmem.toml."""
    from persmem_core.cli.commands import get_host
    from persmem_core.cluster.local_cluster import ADMIN, NatsCluster

    names = [name.strip() for name in clients.split(",") if name.strip()]
    if not names or any(not name.replace("-", "").replace("_", "").isalnum() for name in names):
        raise UserError(f"--clients {clients!r}: give the persmem nodes' names, comma-separated (letters, digits, - "
                        "and _), e.g. --clients node1,node2.")
    root = root or get_host().home / "nats-cluster"
    nats = NatsCluster(root, size=nodes, host=host, client_port=port, clients=names, auth=True, tls=tls)
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        nats.start()
        secured = "credentials (an nkey per persmem node)" + (
            f" and TLS (CA {nats.tls.ca_path})" if nats.tls is not None else " (plain: loopback only)")
        click.echo(f"NATS JetStream cluster of {nodes} node(s) up in {root} (logs: n1.log..n{nodes}.log there), "
                   f"meta leader {nats.meta_leader() or '-'}. Clients need {secured}. In each persmem node's "
                   "persmem.toml:")
        for name in names:
            click.echo(f"# {name}")
            click.echo("[cluster]")
            for line in nats.client_lines(name):
                click.echo(line)
        click.echo(f"The administrator's nkey (all subjects, for `nats --nkey ...`): {nats.seed_path(ADMIN)}")
        click.echo("Ctrl-C stops the cluster.")
        reported: set[str] = set()
        while not stop.wait(1.0):
            for node in nats.nodes:
                if not node.running() and node.name not in reported:
                    reported.add(node.name)
                    click.echo(f"node {node.name} exited with {node.process.returncode}; its log ends:\n"
                               f"{node.log_tail(10)}", err=True)
    finally:
        nats.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    click.echo("NATS cluster stopped.")


@cluster.command()
@click.argument("name")
@click.option("--out", "out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the seed (0600; never replaces a file). Default: <persmem home>/nats-NAME.nk.")
def user(name: str, out: Path | None) -> None:
    """Make NATS credentials for persmem node NAME: an nkey seed file for its [cluster] nkey_file, and the entry for
    every NATS server's `authorization { users: [...] }`, allowed persmem's subjects and streams only."""
    from persmem_core.cli.commands import get_host
    from persmem_core.cluster.local_cluster import new_nkey_seed, nkey_user_entry, node_permissions

    if not name.replace("-", "").replace("_", "").isalnum():
        raise UserError(f"{name!r}: name the node with letters, digits, - and _.")
    out = (out or get_host().home / f"nats-{name}.nk").expanduser().absolute()
    seed, public = new_nkey_seed()
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        raise UserError(f"{out} exists; it is not replaced (a node may use it). Choose another --out, or remove "
                        "it first if it is no longer used.") from None
    with os.fdopen(fd, "wb") as f:
        f.write(seed + b"\n")
    click.echo(f"# {name}: the seed is in {out} (0600). In {name}'s persmem.toml:")
    click.echo("[cluster]")
    click.echo(f"nkey_file = {json.dumps(str(out))}")
    click.echo("# In every NATS server's config, inside authorization { users: [ ... ] }:")
    click.echo(nkey_user_entry(public, node_permissions()))


@cluster.command()
def status() -> None:
    """What the NATS cluster of [cluster] servers reports: servers, meta leader, and each PERSMEM_* stream's
    replicas, leader, messages and how far each follower is behind."""
    from persmem_core.cli.commands import get_host

    host = get_host()
    link = host.cluster
    if link is None:
        raise UserError("no NATS cluster is configured: [cluster] servers in persmem.toml is empty. Add the servers "
                        "(`persmem cluster up` prints the lines for a local trial).")
    try:
        for line in link.run(_report(link), timeout=link.config.request_timeout_seconds * 4 + 5):
            click.echo(line)
    finally:
        link.close()


async def _report(link) -> list[str]:
    from nats.errors import NoRespondersError, TimeoutError as NatsTimeout

    nc, js = link.nc, link.js
    info = nc._server_info  # the INFO of the server this connection is on (nats-py has no public accessor)
    url = nc.connected_url.geturl() if nc.connected_url else "-"
    lines = [f"connected to {info.get('server_name', '?')} ({url}), nats-server {info.get('version', '?')}, "
             f"cluster {info.get('cluster') or '(none: a single server)'}",
             "servers: " + ", ".join(s.geturl() for s in nc.servers)]
    try:  # only the system account may ask; a plain account gets no responders
        reply = await nc.request("$SYS.REQ.SERVER.PING.JSZ", b"{}", timeout=1)
        import json

        meta = (json.loads(reply.data).get("data") or {}).get("meta_cluster") or {}
        lines.append(f"meta leader: {meta.get('leader') or '(none elected)'}")
    except (NoRespondersError, NatsTimeout):
        lines.append("meta leader: not visible to this account (a node's monitoring port shows it at /jsz)")
    account = await js.account_info()
    lines.append(f"JetStream: {account.streams} stream(s), {account.consumers} consumer(s), "
                 f"{account.storage:,} bytes stored")
    streams = sorted((s for s in await js.streams_info() if s.config.name.startswith("PERSMEM_")),
                     key=lambda s: s.config.name)
    if not streams:
        lines.append("no PERSMEM_* streams yet (a persmem node creates them when it starts with [cluster] servers)")
    for stream in streams:
        state, group = stream.state, stream.cluster
        lines.append(f"stream {stream.config.name}: replicas {stream.config.num_replicas}, "
                     f"leader {(group.leader if group else None) or '(none)'}, {state.messages} message(s) "
                     f"(seq {state.first_seq}..{state.last_seq}), {state.consumer_count} consumer(s)")
        for peer in (group.replicas if group else None) or []:
            condition = "offline" if peer.offline else ("current" if peer.current else "catching up")
            seen = f", last seen {peer.active / 1e9:.1f} s ago" if peer.active else ""
            lines.append(f"  {peer.name}: {condition}, lag {peer.lag or 0}{seen}")
    return lines
