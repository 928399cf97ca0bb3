"""How a client hook reaches the running server: the home's local socket, as the agent in `X-Persmem-Agent` (no
token: the socket is the user's own, mode 0600), or with `--url` over HTTP(S) with the token in $PERSMEM_TOKEN;
each request bounded by what is left of the hook's deadline.

The socket is trusted only when it is the user's own (`trusted_socket`), checked before a byte is sent: a home
whose path is too long for a socket name puts it in a shared place, `/tmp/persmem-<uid>/`, which another local
user can create first and listen in (and so receive every prompt). The folder must be a real folder (not a link)
of this user with no access for group or others, the home must be writable by nobody else, the socket must be
this user's, and the process listening on it must run as this user (SO_PEERCRED; root is not taken either: a
server for this user runs as this user, and a root-owned one would be a mistake to point out, not a peer). Anything
else raises `Untrusted`, which names what to remove; `persmem hooks status` checks a socket the same way.

Imported by the hook on every prompt, so the standard library only: `persmem_core` costs about 20 ms more per
start (msgspec, pluggy), so the socket's path is computed here as `persmem_core.paths.socket_path`
does (tests/test_hooks_client.py checks the two agree).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import socket
import stat
import struct
import time
from urllib.parse import urlsplit

AGENT_HEADER = "X-Persmem-Agent"
TOKEN_ENV = "PERSMEM_TOKEN"

# as in persmem_core.paths (copied, see the module docstring)
SOCKET_NAME = "persmem.sock"
MAX_SOCKET_PATH = 100


class HookFailed(Exception):
    """Something the hook cannot do this time; it exits 0 and says nothing (one line with PERSMEM_HOOK_DEBUG=1)."""


class Untrusted(HookFailed):
    """The socket, its folder or the process on it is not the user's own: nothing is sent, and the hook says so in
    one line whatever PERSMEM_HOOK_DEBUG is (someone may be trying to read the user's prompts)."""


def home_dir(environ) -> str:
    """The persmem home as persmem_core.paths.home_dir finds it."""
    if environ.get("PERSMEM_HOME"):
        return os.path.expanduser(environ["PERSMEM_HOME"])
    xdg = environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return os.path.join(os.path.expanduser(xdg), "persmem")


def socket_path(home: str, environ=os.environ) -> str:
    """Where the owner of `home` listens: persmem_core.paths.socket_path, without creating anything."""
    home = os.path.abspath(home)
    path = os.path.join(home, SOCKET_NAME)
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(os.fsencode(home)).hexdigest()[:20]
    base = environ.get("XDG_RUNTIME_DIR")
    folder = base if base and os.path.isdir(base) else f"/tmp/persmem-{os.getuid()}"
    return os.path.join(folder, f"persmem-{digest}.sock")


def _describe(info: os.stat_result) -> str:
    return f"owner uid {info.st_uid}, mode {stat.S_IMODE(info.st_mode):o}"


def trusted_socket(home: str, path: str) -> None:
    """Raise Untrusted unless the socket at `path` (where `home`'s owner listens) and the folder holding it are this
    user's alone; HookFailed when there is simply no server (no folder, no socket). Checked on the path, before
    connecting; the process on the other end is checked once connected (`check_peer`)."""
    uid = os.getuid()
    home = os.path.abspath(home)
    folder = os.path.dirname(path)
    if folder == home:  # <home>/persmem.sock: the home must be writable by nobody else (as the server requires)
        try:
            info = os.stat(home)
        except OSError:
            raise HookFailed("no persmem home") from None
        group_writable = info.st_mode & 0o020 and info.st_gid != os.getgid()
        if info.st_uid != uid or info.st_mode & 0o002 or group_writable:
            raise Untrusted(f"the persmem home {home} is not yours alone ({_describe(info)}): others could plant a "
                            f"fake server there. Run `chmod go-w {home}` as its owner, or use another PERSMEM_HOME")
    else:  # the runtime folder (/tmp/persmem-<uid> or $XDG_RUNTIME_DIR): ours, a real folder, no access for others
        try:
            info = os.lstat(folder)
        except OSError:
            raise HookFailed("no runtime folder: no server") from None
        if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode) or info.st_uid != uid \
                or info.st_mode & 0o077:
            what = "a link" if stat.S_ISLNK(info.st_mode) else "not a folder" if not stat.S_ISDIR(info.st_mode) \
                else _describe(info)
            raise Untrusted(f"{folder} is not a private folder of yours ({what}; it must be yours, mode 700, not a "
                            f"link): another user may have made it to receive your prompts. Remove {folder} "
                            "(as root if it is not yours), then restart `persmem serve`")
    try:
        info = os.lstat(path)
    except OSError:
        raise HookFailed("no socket: no server") from None
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != uid:
        what = "a socket" if stat.S_ISSOCK(info.st_mode) else "not a socket"
        raise Untrusted(f"{path} is not your persmem server's socket ({what}, {_describe(info)}): remove it (as root "
                        "if it is not yours), then restart `persmem serve`")


def check_peer(sock: socket.socket, path: str) -> None:
    """Raise Untrusted unless the process listening on the connected `sock` runs as this user."""
    pid, uid, _ = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if uid != os.getuid():
        raise Untrusted(f"the process listening on {path} (pid {pid}) runs as uid {uid}, not as you "
                        f"(uid {os.getuid()}): it is not your persmem server. Remove {path} (as root if it is not "
                        "yours), then restart `persmem serve`")


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over the home's unix socket, once the socket and the process on it are found to be the user's."""

    def __init__(self, home: str, path: str, timeout: float):
        super().__init__("localhost", timeout=timeout)
        self.home, self.socket_file = home, path

    def connect(self):
        trusted_socket(self.home, self.socket_file)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(self.timeout)
            sock.connect(self.socket_file)
            check_peer(sock, self.socket_file)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


class Server:
    """The running persmem server's /sessions endpoints, each call bounded by what is left of the deadline."""

    def __init__(self, args, environ, deadline: float):
        self.deadline = deadline
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if args.url:
            parts = urlsplit(args.url)
            token = environ.get(TOKEN_ENV)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise HookFailed("--url is not an http(s) URL")
            if not token:
                raise HookFailed(f"--url needs the agent's token in ${TOKEN_ENV}")
            self.headers["Authorization"] = f"Bearer {token}"
            self.prefix = parts.path.rstrip("/")
            secure = parts.scheme == "https"
            self.connect = lambda timeout: (http.client.HTTPSConnection if secure else http.client.HTTPConnection)(
                parts.hostname, parts.port, timeout=timeout)
        else:
            home = args.home or home_dir(environ)
            path = socket_path(home, environ)
            if args.agent:
                self.headers[AGENT_HEADER] = args.agent
            self.prefix = ""
            self.connect = lambda timeout: UnixHTTPConnection(home, path, timeout)
        self.conn = None

    def request(self, method: str, path: str, body=None, accept=(200,)) -> tuple[int, dict]:
        left = self.deadline - time.monotonic()
        if left <= 0.05:
            raise HookFailed("out of time")
        if self.conn is None:
            self.conn = self.connect(left)
        else:
            self.conn.timeout = left
            if self.conn.sock is not None:
                self.conn.sock.settimeout(left)
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        self.conn.request(method, self.prefix + path, body=data, headers=self.headers)
        response = self.conn.getresponse()
        raw = response.read()
        if response.status == 400 and isinstance(body, dict) and "repo" in body and b"repo" in raw:
            # a server started before `repo` existed refuses the field: ask it again without (until it restarts)
            return self.request(method, path, {k: v for k, v in body.items() if k != "repo"}, accept)
        if response.status not in accept:
            raise HookFailed(f"{method} {path.split('/')[2]}: HTTP {response.status}")
        answer = json.loads(raw)
        if not isinstance(answer, dict):
            raise HookFailed(f"{method} {path.split('/')[2]}: the answer is not a JSON object")
        return response.status, answer

    def close(self):
        if self.conn is not None:
            self.conn.close()

