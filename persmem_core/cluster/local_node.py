"""One nats-server process of a local cluster (local_cluster.py): its name, ports, config text, store, log, and
the monitoring endpoint it is asked about its health on.
"""

from __future__ import annotations

import json
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from persmem_core.cluster.local_tls import ClusterTLS

MONITOR_HOST = "127.0.0.1"  # /varz, /connz, /jsz tell who connects and what streams hold: this machine only


def http_json(url: str, timeout: float = 1.0) -> tuple[int, dict]:
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
