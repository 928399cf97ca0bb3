"""A round-robin HTTP load balancer (Debian's haproxy) in front of several persmem nodes, for tests and trials.

`RoundRobinProxy([(host, port), ...], root).start()` writes `root/haproxy.cfg` and runs /usr/sbin/haproxy in
the foreground on a free loopback port: `mode http`, `balance roundrobin` (each request, not each connection,
goes to the next node), a health check of every node's `/healthz` twice a second so a dead node is out within
about a second, and `option redispatch` with `retries` so a request whose connection to a dead node fails goes
to another one. Only failed connections are retried: a request a node has received is never sent twice (a tool
call is not idempotent). `config_text()` is the file docs/scale-out.md shows; `.url` is where clients connect.
"""

from __future__ import annotations

import atexit
import csv
import io
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from persmem_core.errors import UserError
from persmem_core.net.addresses import free_port

HAPROXY = "/usr/sbin/haproxy"


def binary() -> str:
    """The haproxy executable (Debian's, else one on PATH)."""
    if os.access(HAPROXY, os.X_OK):
        return HAPROXY
    found = shutil.which("haproxy")
    if found:
        return found
    raise UserError("haproxy is not installed: apt-get install haproxy (or put any load balancer doing round robin "
                    "over the nodes' /mcp in front of them: docs/scale-out.md).")


class RoundRobinProxy:
    """haproxy spreading HTTP requests over `backends` ([(host, port), ...]) in turn; files under `root`."""

    def __init__(self, backends: list[tuple[str, int]], root: Path, host: str = "127.0.0.1", port: int = 0,
                 check_interval_ms: int = 500, server_timeout_s: int = 300):
        if not backends:
            raise UserError("a round robin needs at least one backend (host, port)")
        self.backends = [(str(h), int(p)) for h, p in backends]
        self.root = Path(root)
        self.host = host
        self.port = port or free_port(host)
        self.check_interval_ms = check_interval_ms
        self.server_timeout_s = server_timeout_s
        self.config_path = self.root / "haproxy.cfg"
        self.log_path = self.root / "haproxy.log"
        self.socket_path = self.root / "haproxy.sock"
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        """http://host:port of the proxy; a persmem client uses url + "/mcp"."""
        return f"http://{self.host}:{self.port}"

    def server_names(self) -> list[str]:
        """haproxy's names of the backends, in order: node1, node2, ..."""
        return [f"node{i + 1}" for i in range(len(self.backends))]

    def config_text(self) -> str:
        """The haproxy.cfg this proxy runs."""
        servers = "\n".join(f"    server {name} {h}:{p} check"
                            for name, (h, p) in zip(self.server_names(), self.backends))
        ms = self.check_interval_ms
        return f"""\
global
    log stdout format raw local0 info
    maxconn 4096
    stats socket {self.socket_path} mode 600 level admin

defaults
    mode http
    log global
    option httplog
    # A node that refuses the connection (down, restarting): try again, on another node.
    retry-on conn-failure
    retries 3
    option redispatch 1
    timeout connect 2s
    # MCP calls can take a while (a search, a send waiting for a quorum) and a live feed streams for long.
    timeout client {self.server_timeout_s}s
    timeout server {self.server_timeout_s}s
    timeout tunnel 1h
    timeout http-request 30s
    timeout http-keep-alive 10s
    timeout queue 10s

frontend persmem
    bind {self.host}:{self.port}
    default_backend persmem_nodes

backend persmem_nodes
    balance roundrobin
    # persmem answers GET /healthz with 200 while it serves; a node failing two checks in a row is out,
    # and back in after one good one.
    # The check names a loopback Host: persmem answers 421 to a Host it does not serve (DNS-rebinding protection).
    option httpchk
    http-check send meth GET uri /healthz ver HTTP/1.1 hdr Host 127.0.0.1
    http-check expect status 200
    default-server inter {ms}ms fastinter {ms}ms downinter {ms}ms fall 2 rise 1
{servers}
"""

    # -- lifecycle ----------------------------------------------------------------------------------------
    def start(self, timeout: float = 15.0) -> RoundRobinProxy:
        """Check and write the config, start haproxy, wait until it accepts connections (UserError with its
        log when it does not within `timeout` seconds)."""
        haproxy = binary()
        self.root.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(self.config_text())
        check = subprocess.run([haproxy, "-c", "-q", "-f", str(self.config_path)], capture_output=True, text=True)
        if check.returncode != 0:
            raise UserError(f"haproxy refused {self.config_path}: {(check.stderr or check.stdout).strip()}")
        log = open(self.log_path, "ab")
        try:
            self.process = subprocess.Popen([haproxy, "-db", "-f", str(self.config_path)], stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            log.close()
        atexit.register(self.stop)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise UserError(f"haproxy exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise UserError(f"haproxy did not listen on {self.host}:{self.port} within {timeout:g} s:\n{self.log_tail()}")

    def stop(self) -> None:
        """Stop haproxy (SIGTERM, SIGKILL after 5 s). Safe to call twice."""
        atexit.unregister(self.stop)
        if self.process is None or self.process.poll() is not None:
            return
        os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def __enter__(self) -> RoundRobinProxy:
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- what haproxy thinks ------------------------------------------------------------------------------
    def server_states(self) -> dict[str, str]:
        """Each backend's health as haproxy sees it: {"node1": "UP", "node2": "DOWN", ...}."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(2)
            sock.connect(str(self.socket_path))
            sock.sendall(b"show stat\n")
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        rows = csv.DictReader(io.StringIO(data.decode().lstrip("# ")))
        return {row["svname"]: row["status"].split()[0] for row in rows
                if row.get("pxname") == "persmem_nodes" and row["svname"] not in ("BACKEND", "FRONTEND")}

    def wait_states(self, expected: dict[str, str], timeout: float = 10.0) -> None:
        """Wait until haproxy reports `expected` (e.g. {"node1": "DOWN"}); UserError with what it reports after
        `timeout` seconds."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            states = self.server_states()
            if all(states.get(name) == state for name, state in expected.items()):
                return
            time.sleep(0.05)
        raise UserError(f"haproxy reports {states}, not {expected}, after {timeout:g} s")

    def log_tail(self, lines: int = 25) -> str:
        if not self.log_path.exists():
            return "(no log)"
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
