"""The persmem client hook: the command Claude Code and Codex run on their hook events, a thin, fail-open client of
the running persmem server. ONE self-contained file of the standard library only (no import of persmem, nothing
package-relative), so that it (1) starts fast: `persmem hooks install` runs it as
`<python> -I -S /abs/path/hook.py --client ...` (-S skips site-packages and its .pth finders; no
http.client, argparse or hashlib on the hot path: a request is a few lines of HTTP/1.1 on a socket), and (2) can be
copied alone to a machine without persmem: the server serves this file at GET /hooks/client.py, and

    curl -fsS https://box/hooks/client.py -o ~/.persmem-hook.py && python3 ~/.persmem-hook.py install --url https://box/ --agent kite

installs it (token on stdin or in $PERSMEM_TOKEN, written 0600). That is why it is longer than 400 lines: the
connection, the events, the settings merge (which installer.py imports from here) and `install` must live in one
file.

    python3 -I -S hook.py --client claude|codex [--agent NAME] [--home PATH] [--url URL [--token-file PATH]]
    python3 hook.py install --url URL --agent NAME [--target claude|codex|all] [--token-file PATH]
    python3 hook.py uninstall [--target claude|codex|all]

The client writes the event as JSON on stdin (session_id, transcript_path, cwd, hook_event_name, and per event
source / prompt / trigger / reason). By `hook_event_name`:
- SessionStart      POST /sessions/briefing, print its context for the client to add to the session.
- UserPromptSubmit  POST /sessions/recall, print the memories relevant to this prompt (if any).
- Stop, PreCompact, SessionEnd: send the transcript's lines the server does not have yet (GET how many it has,
  POST the rest in batches under ~1 MB). A Codex event may carry no transcript_path: then the session's rollout
  is looked up under $CODEX_HOME/sessions by its id.

Printed: `{"hookSpecificOutput": {"hookEventName": ..., "additionalContext": ...}}`, and only when there is
context to add. The server is reached on the home's local socket, as the agent in `X-Persmem-Agent` (no token: the
socket is the user's own), only when the socket and the process on it are the user's own; or with `--url` over
HTTP(S) with the agent's bearer token, read at each run from `--token-file` (a 0600 file of this user) or
$PERSMEM_TOKEN. A socket that is not the user's gets nothing: the hook prints one line naming what to remove (on
stderr, and to the user as the client's `systemMessage`); it still exits 0 and the session goes on.

The socket is trusted only when it is the user's own (`trusted_socket`), checked before a byte is sent: a home
whose path is too long for a socket name puts it in a shared place, `/tmp/persmem-<uid>/`, which another local
user can create first and listen in. The folder must be a real folder (not a link) of this user with no access for
group or others, the home must be writable by nobody else, the socket must be this user's, and the process
listening on it must run as this user (SO_PEERCRED; root is not taken either). `persmem hooks status` checks a
socket the same way. The socket's path is computed as `persmem_core.paths.socket_path` does (a test checks).

Fail open, always: whatever goes wrong (no server, a slow one, a refusal, bad JSON on stdin or in the answer, a
missing transcript) the hook exits 0 with nothing on stdout, within its own deadline for the event, well under the
timeout the install gives the client. With PERSMEM_HOOK_DEBUG=1 it writes one short line to stderr saying what
happened and how to fix it (never a secret).
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import struct
import sys
import time

def _json_codec():
    """(loads, dumps) over `_json`, the C half of the standard json package, when it has what json uses: `import
    json` imports `re` (about 10 ms of every start, a third of the hook's own time). json itself otherwise."""
    try:
        import _json

        class Options:  # what json.JSONDecoder hands its C scanner
            strict, object_hook, object_pairs_hook = True, None, None
            parse_float, parse_int = float, int
            parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}.__getitem__

        scan = _json.make_scanner(Options())

        def no_default(value):
            raise TypeError(f"{type(value).__name__} is not JSON serializable")

        encoders = {ascii_only: _json.make_encoder(None, no_default, escape, None, ": ", ", ", False, False, True)
                    for ascii_only, escape in ((True, _json.encode_basestring_ascii),
                                               (False, _json.encode_basestring))}

        def loads(text):
            if isinstance(text, (bytes, bytearray)):
                text = bytes(text).decode("utf-8-sig", "surrogatepass")
            start = len(text) - len(text.lstrip(" \t\n\r"))
            try:
                value, end = scan(text, start)
            except StopIteration as exc:
                raise ValueError(f"not JSON (at character {exc.value})") from None
            if text[end:].strip(" \t\n\r"):
                raise ValueError(f"not JSON: extra data at character {end}")
            return value

        def dumps(value, ensure_ascii=True):
            return "".join(encoders[ensure_ascii](value, 0))

        if loads(dumps({"a": [1, 2.5, None, True, "\u00e9\\"]}, False)) != {"a": [1, 2.5, None, True, "\u00e9\\"]}:
            raise ImportError("_json differs")
        return loads, dumps
    except (ImportError, AttributeError, TypeError, ValueError):
        import json

        return json.loads, lambda value, ensure_ascii=True: json.dumps(value, ensure_ascii=ensure_ascii)


loads, dumps = _json_codec()


# Each event's whole wall time, process start excluded; the client's timeout (EVENTS below) leaves a margin for
# the start on a loaded machine: 2 s at least, 1 s for SessionEnd (Codex caps its timeout at 3 s).
DEADLINES = {"SessionStart": 3.0, "UserPromptSubmit": 1.5, "Stop": 2.5, "PreCompact": 2.5, "SessionEnd": 2.0}
DEFAULT_DEADLINE = 1.5  # until the event is known
BATCH_BYTES = 900_000  # one POST's JSON stays under the 1 MB the server takes per capture
LONG_STRING = 16_000  # a transcript line too big for one batch has its strings cut to this many characters
MAX_STDIN = 8 * 1024 * 1024
MAX_PROMPT = 20_000  # recall searches with the prompt's start; a pasted log is not a better query
MAX_ANSWER = 16 * 1024 * 1024
DEBUG_ENV = "PERSMEM_HOOK_DEBUG"
AGENT_HEADER = "X-Persmem-Agent"
TOKEN_ENV = "PERSMEM_TOKEN"
SOCKET_NAME = "persmem.sock"  # as in persmem_core.paths
MAX_SOCKET_PATH = 100
USAGE = ("usage: hook.py --client claude|codex [--agent NAME] [--home PATH] [--url URL [--token-file PATH]]\n"
         "       hook.py install --url URL --agent NAME [--target claude|codex|all] [--token-file PATH]\n"
         "       hook.py uninstall [--target claude|codex|all]")


class HookFailed(Exception):
    """Something the hook cannot do this time; it exits 0 and says nothing (one line with PERSMEM_HOOK_DEBUG=1)."""


class Untrusted(HookFailed):
    """The socket, its folder or the process on it is not the user's own: nothing is sent, and the hook says so in
    one line whatever PERSMEM_HOOK_DEBUG is (someone may be trying to read the user's prompts)."""


class UsageError(Exception):
    """Bad command-line arguments."""


def parse_options(argv, allowed: dict[str, str | None]) -> dict:
    """`--name value` pairs (or `--name=value`) for the names in `allowed`; required ones have a value there."""
    options, words = {}, list(argv)
    while words:
        word = words.pop(0)
        name, _, value = word.partition("=")
        if name not in allowed:
            raise UsageError(f"unknown argument {word!r}\n{USAGE}")
        if not _:
            if not words:
                raise UsageError(f"{name} needs a value\n{USAGE}")
            value = words.pop(0)
        options[name[2:].replace("-", "_")] = value
    for name, choices in allowed.items():
        key = name[2:].replace("-", "_")
        if choices == "required" and key not in options:
            raise UsageError(f"{name} is required\n{USAGE}")
    return options


# -- where the server is, and whether its socket is the user's own ---------------------------------------------


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
    import hashlib  # only for a long home: ~5 ms at start otherwise

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
    no_server = f"no persmem server on {path}: start it with `persmem serve`"
    if folder == home:  # <home>/persmem.sock: the home must be writable by nobody else (as the server requires)
        try:
            info = os.stat(home)
        except OSError:
            raise HookFailed(f"no persmem home at {home}: {no_server}") from None
        group_writable = info.st_mode & 0o020 and info.st_gid != os.getgid()
        if info.st_uid != uid or info.st_mode & 0o002 or group_writable:
            raise Untrusted(f"the persmem home {home} is not yours alone ({_describe(info)}): others could plant a "
                            f"fake server there. Run `chmod go-w {home}` as its owner, or use another PERSMEM_HOME")
    else:  # the runtime folder (/tmp/persmem-<uid> or $XDG_RUNTIME_DIR): ours, a real folder, no access for others
        try:
            info = os.lstat(folder)
        except OSError:
            raise HookFailed(no_server) from None
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
        raise HookFailed(no_server) from None
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


def read_token_file(path: str) -> str:
    """The bearer token in `path`: a file of this user that nobody else can read (else HookFailed, naming the fix)."""
    path = os.path.expanduser(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise HookFailed(f"cannot read the token file {path} ({exc.strerror}): run the hook install again") from None
    with os.fdopen(fd, "rb") as file:
        info = os.fstat(file.fileno())
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise HookFailed(f"the token file {path} is readable by others ({_describe(info)}): `chmod 600 {path}`")
        token = file.read(4096).decode("utf-8", errors="replace").strip()
    if not token:
        raise HookFailed(f"the token file {path} is empty: run the hook install again")
    return token


# -- HTTP/1.1 on a socket (http.client costs ~40 ms to import: the email package) -----------------------------


def split_url(url: str) -> tuple[bool, str, int, str]:
    """(https?, host, port, path prefix) of an http(s) base URL; HookFailed for anything else."""
    scheme, sep, rest = url.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in ("http", "https"):
        raise HookFailed(f"--url {url!r} is not an http(s) URL")
    netloc, slash, path = rest.partition("/")
    netloc = netloc.rpartition("@")[2]
    if netloc.startswith("["):
        host, _, port = netloc[1:].partition("]")
        port = port.lstrip(":")
    else:
        host, _, port = netloc.partition(":")
    if not host or (port and not port.isdigit()):
        raise HookFailed(f"--url {url!r} has no host (or a bad port)")
    secure = scheme == "https"
    return secure, host, int(port) if port else (443 if secure else 80), ("/" + path).rstrip("/") if slash else ""


class Server:
    """The running persmem server's /sessions endpoints, each call bounded by what is left of the deadline."""

    def __init__(self, options: dict, environ, deadline: float):
        self.deadline = deadline
        self.sock = None
        self.headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if options.get("url"):
            self.secure, self.host, self.port, self.prefix = split_url(options["url"])
            token = read_token_file(options["token_file"]) if options.get("token_file") else environ.get(TOKEN_ENV)
            if not token:
                raise HookFailed(f"--url needs the agent's token: --token-file PATH or ${TOKEN_ENV}")
            self.headers["Authorization"] = f"Bearer {token}"
            self.headers["Host"] = self.host if self.port in (80, 443) else f"{self.host}:{self.port}"
            self.where = options["url"]
        else:
            self.home = options.get("home") or home_dir(environ)
            self.path = socket_path(self.home, environ)
            if options.get("agent"):
                self.headers[AGENT_HEADER] = options["agent"]
            self.headers["Host"] = "localhost"
            self.prefix, self.where = "", self.path

    def _connect(self, timeout: float):
        if hasattr(self, "path"):
            trusted_socket(self.home, self.path)
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.settimeout(timeout)
                sock.connect(self.path)
                check_peer(sock, self.path)
            except BaseException:
                sock.close()
                raise
            return sock
        sock = socket.create_connection((self.host, self.port), timeout=timeout)
        if self.secure:
            import ssl  # only for https: ~10 ms

            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self.host)
        return sock

    def _exchange(self, method: str, path: str, data: bytes | None) -> tuple[int, bytes]:
        head = [f"{method} {self.prefix}{path} HTTP/1.1"] + [f"{k}: {v}" for k, v in self.headers.items()]
        head.append(f"Content-Length: {len(data or b'')}")
        self.sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + (data or b""))
        reader = self.sock.makefile("rb")
        try:
            status_line = reader.readline(65537)
            if not status_line:
                raise ConnectionResetError("the server closed the connection")
            status = int(status_line.split()[1])
            fields = {}
            while True:
                line = reader.readline(65537)
                if line in (b"\r\n", b"\n", b""):
                    break
                name, _, value = line.decode("latin-1").partition(":")
                fields[name.strip().lower()] = value.strip()
            if fields.get("transfer-encoding", "").lower() == "chunked":
                body = b""
                while True:
                    size = int(reader.readline(1024).split(b";")[0], 16)
                    if size == 0 or len(body) > MAX_ANSWER:
                        break
                    body += reader.read(size)
                    reader.readline(3)
            elif "content-length" in fields:
                body = reader.read(min(int(fields["content-length"]), MAX_ANSWER))
            else:
                body = reader.read(MAX_ANSWER)
                fields["connection"] = "close"
        finally:
            reader.close()
        if fields.get("connection", "").lower() == "close":
            self.close()
        return status, body

    def request(self, method: str, path: str, body=None, accept=(200,)) -> tuple[int, dict]:
        left = self.deadline - time.monotonic()
        if left <= 0.05:
            raise HookFailed("out of time")
        data = None if body is None else dumps(body, False).encode()
        fresh = self.sock is None
        if fresh:
            self.sock = self._connect(left)
        self.sock.settimeout(left)
        try:
            status, raw = self._exchange(method, path, data)
        except (ConnectionResetError, BrokenPipeError):
            self.close()
            if fresh:
                raise
            self.sock = self._connect(left)  # a kept-alive connection the server had closed: once more
            status, raw = self._exchange(method, path, data)
        if status == 400 and isinstance(body, dict) and "repo" in body and b"repo" in raw:
            # a server started before `repo` existed refuses the field: ask it again without (until it restarts)
            return self.request(method, path, {k: v for k, v in body.items() if k != "repo"}, accept)
        if status not in accept:
            fix = {401: ": the token is wrong or revoked, install the hook again with the agent's token",
                   404: ": is the sessions plugin enabled on the server?"}.get(status, "")
            raise HookFailed(f"{method} {path.split('/')[2]}: HTTP {status}{fix}")
        answer = loads(raw)
        if not isinstance(answer, dict):
            raise HookFailed(f"{method} {path.split('/')[2]}: the answer is not a JSON object")
        return status, answer

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None


# -- the events --------------------------------------------------------------------------------------------------


def git_root(cwd: str) -> str | None:
    """The nearest folder at or above `cwd` that holds `.git` (a folder, or a file for worktrees), on this (the
    client's) disk."""
    folder = "/" + os.path.normpath(cwd).lstrip("/")
    while True:
        try:
            if os.path.lexists(os.path.join(folder, ".git")):
                return folder
        except (OSError, ValueError):
            return None
        if folder == "/":
            return None
        folder = os.path.dirname(folder)


def context_output(event_name: str, context) -> str:
    """What the client adds to the session: nothing unless there is text to add."""
    if not isinstance(context, str) or not context.strip():
        return ""
    # ASCII only: the client's locale may not be UTF-8, and JSON's \\u escapes carry every character
    return dumps({"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": context}})


def repo_of(event: dict) -> str:
    """The repository root at or above the event's working folder, found on this (the client's) disk: the
    server names the session's project after it, and looks at its own disk only inside its workspace roots."""
    cwd = event.get("cwd")
    return (git_root(cwd) or "") if isinstance(cwd, str) and cwd.startswith("/") and "\0" not in cwd else ""


def briefing(server: Server, client: str, event: dict) -> str:
    _, answer = server.request("POST", "/sessions/briefing", {
        "client": client, "session_id": event["session_id"], "cwd": event.get("cwd") or "", "repo": repo_of(event),
        "source": event.get("source") or "startup"})
    return context_output("SessionStart", answer.get("context"))


def recall(server: Server, client: str, event: dict) -> str:
    prompt = event.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        return ""
    _, answer = server.request("POST", "/sessions/recall", {
        "client": client, "session_id": event["session_id"], "cwd": event.get("cwd") or "", "repo": repo_of(event),
        "prompt": prompt[:MAX_PROMPT]})
    return context_output("UserPromptSubmit", answer.get("context"))


def codex_rollout(session_id: str, environ) -> str | None:
    """A Codex session's rollout file, `$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<session id>.jsonl`,
    newest days first (the session being captured is almost always today's)."""
    root = os.path.join(os.path.expanduser(environ.get("CODEX_HOME") or "~/.codex"), "sessions")
    suffix = f"-{session_id}.jsonl"

    def newest_first(folder):
        try:
            return sorted(os.scandir(folder), key=lambda entry: entry.name, reverse=True)
        except OSError:
            return []

    stack = [root]
    while stack:
        folder = stack.pop()
        entries = newest_first(folder)
        for entry in entries:
            if entry.name.startswith("rollout-") and entry.name.endswith(suffix) and entry.is_file():
                return entry.path
        stack.extend(entry.path for entry in reversed(entries) if entry.is_dir(follow_symlinks=False))
    return None


def _cut_strings(value):
    if isinstance(value, str):
        return value if len(value) <= LONG_STRING else f"{value[:LONG_STRING]}[... {len(value) - LONG_STRING} " \
                                                        "characters cut by the persmem hook]"
    if isinstance(value, list):
        return [_cut_strings(item) for item in value]
    if isinstance(value, dict):
        return {key: _cut_strings(item) for key, item in value.items()}
    return value


def json_size(line: str) -> int:
    """Bytes `line` takes inside the POST's JSON (a JSON line's own quotes and backslashes get escaped)."""
    return len(dumps(line, False).encode())


def fit_line(line: str) -> str:
    """A transcript line small enough for one batch: as it is, else (a pasted image, a huge tool output) the same
    JSON with its long strings cut, else a note saying a line was left out. Every line is sent, so the server's
    line count keeps matching the file's."""
    if json_size(line) < BATCH_BYTES // 2:
        return line
    try:  # RecursionError: a line nested deeper than the parser (or _cut_strings) goes is left out below
        value = _cut_strings(loads(line))
        cut = dumps(value, False)
        if not cut.isascii():
            try:
                cut.encode()
            except UnicodeEncodeError:  # a lone surrogate (a string cut inside an emoji): keep it escaped
                cut = dumps(value)
    except (ValueError, RecursionError):
        cut = ""
    if cut and json_size(cut) < BATCH_BYTES // 2:
        return cut
    return dumps({"type": "persmem-omitted", "bytes": len(line.encode()),
                       "note": "a transcript line too large to archive"})


def new_lines(path: str, skip: int):
    """The transcript's complete lines after the first `skip`, read as they are sent (a long transcript captured
    for the first time makes progress batch by batch within the deadline); a last line still being written is
    left for the next capture."""
    with open(path, "rb") as transcript:
        for number, raw in enumerate(transcript):
            if number < skip:
                continue
            if not raw.endswith(b"\n"):
                return
            yield fit_line(raw[:-1].decode("utf-8", errors="replace").rstrip("\r"))


def batches(lines):
    """`lines` in order, in lists whose JSON stays under BATCH_BYTES (each line fits: fit_line)."""
    batch, size = [], 0
    for line in lines:
        cost = json_size(line) + 2
        if batch and size + cost >= BATCH_BYTES:
            yield batch
            batch, size = [], 0
        batch.append(line)
        size += cost
    if batch:
        yield batch


def capture(server: Server, client: str, event: dict, environ) -> str:
    """Send the lines the server has not archived yet, oldest first, as many batches as the deadline allows (the
    rest goes with the next event)."""
    from urllib.parse import quote  # capture only: recall and briefing skip its import

    session_id = event["session_id"]
    path = event.get("transcript_path")
    if not path and client == "codex":
        path = codex_rollout(session_id, environ)
    if not isinstance(path, str) or not path:
        raise HookFailed("no transcript to capture")
    path = os.path.expanduser(path)
    _, answer = server.request("GET", f"/sessions/capture/{quote(client, safe='')}/{quote(session_id, safe='')}")
    archived = answer.get("lines")
    for _attempt in range(3):  # another hook of this session may send the same lines at the same moment
        if not isinstance(archived, int) or archived < 0:
            raise HookFailed("the server's line count is not a number")
        for batch in batches(new_lines(path, archived)):
            status, answer = server.request("POST", "/sessions/capture", {
                "client": client, "session_id": session_id, "cwd": event.get("cwd") or "", "repo": repo_of(event),
                "first_line": archived, "lines": batch, "event": event.get("hook_event_name")}, accept=(200, 409))
            if status == 409:  # the server has a different count: go on from its count
                archived = answer.get("lines")
                break
            archived += len(batch)
        else:
            return ""
    return ""


def read_event(stdin) -> dict:
    raw = stdin.read(MAX_STDIN + 1)
    if len(raw) > MAX_STDIN:
        raise HookFailed("the event on stdin is too large")
    event = loads(raw)
    if not isinstance(event, dict):
        raise HookFailed("the event on stdin is not a JSON object")
    if not isinstance(event.get("session_id"), str) or not event["session_id"]:
        raise HookFailed("the event has no session_id")
    return event


def run(argv, stdin, environ, started: float) -> str:
    """The text to print (may be empty); raises on any failure."""
    options = parse_options(argv, {"--client": "required", "--agent": None, "--home": None, "--url": None,
                                   "--token-file": None})
    if options["client"] not in ("claude", "codex"):
        raise UsageError(f"--client is claude or codex\n{USAGE}")
    event = read_event(stdin)
    name = event.get("hook_event_name")
    if name not in DEADLINES:
        return ""  # an event these hooks were not installed for: nothing to do
    deadline = started + DEADLINES[name]
    signal.setitimer(signal.ITIMER_REAL, max(deadline - time.monotonic(), 0.01))
    server = Server(options, environ, deadline)
    try:
        if name == "SessionStart":
            return briefing(server, options["client"], event)
        if name == "UserPromptSubmit":
            return recall(server, options["client"], event)
        return capture(server, options["client"], event, environ)
    finally:
        server.close()


def _out_of_time(signum, frame):
    """The deadline passed: leave at once, exit 0, nothing on stdout (whatever the hook was doing)."""
    if os.environ.get(DEBUG_ENV) == "1":
        os.write(2, b"persmem hook: out of time\n")
    os._exit(0)


def hook_main(argv) -> int:
    started = time.monotonic()
    debug = os.environ.get(DEBUG_ENV) == "1"
    signal.signal(signal.SIGALRM, _out_of_time)
    # the deadline covers everything, reading stdin and connecting included; tightened once the event is known
    signal.setitimer(signal.ITIMER_REAL, DEFAULT_DEADLINE)
    outcome = ""
    try:
        text = run(argv, sys.stdin.buffer, os.environ, started)
        signal.setitimer(signal.ITIMER_REAL, 0)
        if text:
            sys.stdout.write(text + "\n")
            sys.stdout.flush()
        outcome = f"ok, {len(text)} characters out"
    except UsageError as exc:  # its text goes to stderr only with debug: the client shows stderr
        signal.setitimer(signal.ITIMER_REAL, 0)
        outcome = f"bad arguments: {exc}"
    except Untrusted as exc:  # nothing was sent; the user must hear of it (the session goes on)
        signal.setitimer(signal.ITIMER_REAL, 0)
        warning = f"persmem hook: sent nothing: {exc}"
        sys.stderr.write(warning + "\n")
        sys.stdout.write(dumps({"systemMessage": warning}) + "\n")
        sys.stdout.flush()
        return 0
    except BaseException as exc:  # fail open: the client's session must not notice
        signal.setitimer(signal.ITIMER_REAL, 0)
        outcome = str(exc) if isinstance(exc, HookFailed) else _explain(exc)
    if debug:
        sys.stderr.write(f"persmem hook: {outcome[:300]} in {(time.monotonic() - started) * 1000:.0f} ms\n")
    return 0


def _explain(exc: BaseException) -> str:
    if isinstance(exc, (ConnectionRefusedError, FileNotFoundError)):
        return f"{type(exc).__name__}: no persmem server answers ({exc.strerror}): start it with `persmem serve`"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return f"{type(exc).__name__}: the persmem server did not answer in time"
    if isinstance(exc, OSError):
        return f"{type(exc).__name__}: {exc.strerror or exc}: is the persmem server running and reachable?"
    return type(exc).__name__


# -- install: the hook entries in Claude Code's / Codex's settings (installer.py uses these too) ------------------

CLIENTS = ("claude", "codex")
BACKUP_MARK = ".persmem-backup-"
# event -> (matcher, the client's timeout in seconds): the hook keeps its own deadline well under each (DEADLINES)
EVENTS = {
    "SessionStart": ("startup|resume|clear|compact", 5),
    "UserPromptSubmit": (None, 3),
    "Stop": (None, 5),
    "PreCompact": (None, 5),
    "SessionEnd": (None, 3),
}
# what marks a handler as ours: the module (`-m` of old, or imported), the file, the downloaded client's name
MARKERS = ("persmem_sessions.hook", "persmem_sessions/hook.py", "persmem-hook.py")
FEATURE_KEY = "hooks"  # Codex's [features] switch (on by default since it went stable; was "codex_hooks")
FEATURE_LINE = f"{FEATURE_KEY} = true"
OLD_FEATURE_KEY = "codex_hooks"  # deprecated: Codex warns at every start while it is set


class SettingsError(Exception):
    """A settings file we cannot edit without losing the user's settings; nothing was changed."""


class Target:
    """One client's config folder, its hooks file (JSON) and, for Codex, config.toml (the feature switch)."""

    def __init__(self, client: str, folder: str, hooks_file: str, feature_file: str | None):
        from pathlib import Path

        self.client, self.folder, self.hooks_file = client, Path(folder), Path(hooks_file)
        self.feature_file = Path(feature_file) if feature_file else None

    def __eq__(self, other):
        return isinstance(other, Target) and vars(self) == vars(other)


def targets(environ=os.environ) -> dict:
    claude = os.path.expanduser(environ.get("CLAUDE_CONFIG_DIR") or "~/.claude")
    codex = os.path.expanduser(environ.get("CODEX_HOME") or "~/.codex")
    return {"claude": Target("claude", claude, os.path.join(claude, "settings.json"), None),
            "codex": Target("codex", codex, os.path.join(codex, "hooks.json"), os.path.join(codex, "config.toml"))}


def chosen_targets(target: str, environ=os.environ) -> list:
    """The targets `--target` names for an install. `all` takes the clients whose config folder exists here, and
    refuses (SettingsError) when neither does: creating ~/.codex for a user without Codex would be noise, and
    installing nowhere must not look like success."""
    found = targets(environ)
    if target != "all":
        return [found[target]]
    present = [t for t in found.values() if t.folder.is_dir()]
    if not present:
        raise SettingsError(
            f"neither {found['claude'].folder} (Claude Code) nor {found['codex'].folder} (Codex) exists here, so "
            "there is nowhere to install the hooks. Install and start the client first (or set CLAUDE_CONFIG_DIR / "
            "CODEX_HOME to its folder), or pass --target claude / --target codex to create its folder anyway.")
    return present


def hook_command(python: str, script: str, client: str, extra: list[str], package: str = "") -> str:
    """The line the client runs, each word quoted for the shell. Inside persmem's package: `python -I -S -c "import
    persmem_sessions.hook..."` (imported, not run as a script: its compiled code is cached in __pycache__, which
    saves compiling ~1000 lines at every prompt); a copy of this file alone (~/.persmem-hook.py): `python -I -S
    script`."""
    import shlex

    script = os.path.abspath(script)
    if package:
        parent = os.path.dirname(os.path.dirname(script))
        module = f"{package}.{os.path.basename(script)[:-3]}"
        code = f"import sys;sys.path.append({parent!r});import {module} as h;sys.exit(h.main())"
        words = [python, "-I", "-S", "-c", code]
    else:
        words = [python, "-I", "-S", script]
    return shlex.join([*words, "--client", client, *extra])


def is_ours(handler) -> bool:
    command = str(handler.get("command", "")) if isinstance(handler, dict) else ""
    return any(marker in command for marker in MARKERS) or os.path.abspath(__file__) in command


def our_group(event: str, command: str) -> dict:
    matcher, timeout = EVENTS[event]
    group = {"matcher": matcher} if matcher else {}
    return group | {"hooks": [{"type": "command", "command": command, "timeout": timeout}]}


def read_json(path) -> tuple:
    """The file's bytes (None when it does not exist) and its object; refuses anything we could not edit
    without losing the user's settings."""
    import json

    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None, {}
    except OSError as exc:
        raise SettingsError(f"cannot read {path}: {exc.strerror}. Nothing was changed.") from None
    try:
        data = json.loads(raw) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError) as exc:
        raise SettingsError(f"{path} is not valid JSON ({exc}); persmem left it untouched. Fix the file (or move "
                            "it away) and run the command again.") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{path} does not hold a JSON object; persmem left it untouched. Fix the file (or move "
                            "it away) and run the command again.")
    hooks = data.get("hooks", {})
    bad = "its \"hooks\" is not an object" if not isinstance(hooks, dict) else next(
        (f'its "hooks"."{event}" is not a list' for event in EVENTS if not isinstance(hooks.get(event, []), list)),
        None)
    if bad:
        raise SettingsError(f"{path}: {bad}; persmem left it untouched. Fix the file and run the command again.")
    return raw, data


def without_ours(data: dict) -> tuple:
    """`data` with our handlers taken out (a matcher group or event left empty by that goes too) and the events
    they were in."""
    import json

    data = json.loads(json.dumps(data))
    hooks = data.get("hooks")
    touched = []
    if not isinstance(hooks, dict):
        return data, touched
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept = []
        for group in groups:
            handlers = group.get("hooks") if isinstance(group, dict) else None
            if isinstance(handlers, list) and any(is_ours(h) for h in handlers):
                touched.append(event)
                handlers = [h for h in handlers if not is_ours(h)]
                if not handlers:
                    continue
                group = group | {"hooks": handlers}
            kept.append(group)
        if event in touched and not kept:
            del hooks[event]
        else:
            hooks[event] = kept
    if touched and not hooks:
        del data["hooks"]
    return data, list(dict.fromkeys(touched))


def with_ours(data: dict, command: str) -> tuple:
    """`data` with exactly one handler of ours per event, running `command`; what changed, one line each."""
    import json

    changes = []
    data = json.loads(json.dumps(data))
    hooks = data.setdefault("hooks", {})
    for event in EVENTS:
        groups = hooks.get(event, [])
        wanted = our_group(event, command)
        ours = [group for group in groups if isinstance(group, dict) and isinstance(group.get("hooks"), list)
                and any(is_ours(h) for h in group["hooks"])]
        if ours == [wanted]:
            continue
        kept = [group for group in without_ours({"hooks": {event: groups}})[0].get("hooks", {}).get(event, [])]
        hooks[event] = kept + [wanted]
        changes.append(f"{'replaced' if ours else 'added'} the {event} hook (timeout {EVENTS[event][1]} s)")
    return data, changes


def json_text(data: dict) -> bytes:
    import json

    return (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode()


def parse_toml(path, text: str) -> dict:
    import tomllib

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"{path} is not valid TOML ({exc}); persmem left it untouched. Fix the file and run "
                            "the command again.") from None


def hooks_enabled(config: dict) -> bool:
    features = config.get("features")
    return isinstance(features, dict) and features.get(FEATURE_KEY) is True


def enable_hooks_text(text: str) -> str:
    """Codex's config.toml `text` with `hooks = true` under [features] (set in place if the key is there, else
    added right under the [features] header, else a [features] table appended) and without the deprecated
    `codex_hooks = true` an older install wrote. Every other line and comment stays (edited as text)."""
    import re

    header_re = re.compile(r"^\s*\[\[?\s*([^\]\[]+?)\s*\]\]?\s*(#.*)?$")  # [table] or [[array of tables]]
    key_re = re.compile(rf"^\s*{FEATURE_KEY}\s*=")
    dotted_re = re.compile(rf"^\s*features\s*\.\s*{FEATURE_KEY}\s*=")
    old_re = re.compile(rf"^\s*(features\s*\.\s*)?{OLD_FEATURE_KEY}\s*=\s*true\s*(#.*)?$")
    lines, table = [], None
    for line in text.splitlines(keepends=True):
        header = header_re.match(line)
        table = header.group(1).strip() if header else table
        if not header and old_re.match(line) and (table == "features") != bool(old_re.match(line).group(1)):
            continue  # the deprecated switch we used to write
        lines.append(line)
    table = None
    for number, line in enumerate(lines):
        header = header_re.match(line)
        if header:
            table = header.group(1).strip()
            rest = lines[number + 1:]
            section = rest[:next((i for i, later in enumerate(rest) if header_re.match(later)), len(rest))]
            if table == "features" and not any(key_re.match(later) for later in section):
                return "".join(lines[:number + 1] + [FEATURE_LINE + "\n"] + lines[number + 1:])
        elif (table == "features" and key_re.match(line)) or (table is None and dotted_re.match(line)):
            key = FEATURE_KEY if table == "features" else f"features.{FEATURE_KEY}"
            ending = "\n" if line.endswith("\n") else ""
            return "".join(lines[:number] + [f"{key} = true{ending}"] + lines[number + 1:])
    text = "".join(lines)
    gap = "" if not text else ("\n" if text.endswith("\n") else "\n\n")
    return f"{text}{gap}[features]\n{FEATURE_LINE}\n"


def backup(path, raw: bytes):
    """A private copy of `raw` beside `path`, named by the UTC time (never overwriting an earlier one)."""
    stem = f"{path.name}{BACKUP_MARK}{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
    for n in range(1, 1000):
        candidate = path.with_name(stem if n == 1 else f"{stem}-{n}")
        try:
            fd = os.open(candidate, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "wb") as out:
            out.write(raw)
        return candidate
    raise SettingsError(f"too many backups of {path} in {path.parent}; remove old {path.name}{BACKUP_MARK}* files.")


def write_file(path, data: bytes) -> None:
    """Replace the file's content atomically (fsynced); through a link (dotfiles kept elsewhere) to its target,
    keeping the file's mode (a new file is 0600: settings may hold keys)."""
    real = os.path.realpath(path)
    try:
        mode = os.stat(real).st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o600
    os.makedirs(os.path.dirname(real), mode=0o700, exist_ok=True)
    tmp = os.path.join(os.path.dirname(real), f".persmem-{os.getpid()}-{time.monotonic_ns()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
            out.flush()
            os.fchmod(out.fileno(), mode)
            os.fsync(out.fileno())
        os.replace(tmp, real)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _changed(path, raw, new: bytes, write) -> str:
    saved = f" (backup: {backup(path, raw)})" if raw is not None else " (created)"
    write(path, new)
    return f"{path}{saved}:"


def install_target(target: Target, command: str, write=write_file) -> list:
    """Our hooks into the target's files (both read and checked before either changes); what changed, by line."""
    raw, data = read_json(target.hooks_file)
    feature_raw = feature_text = None
    if target.feature_file is not None:
        try:
            feature_raw = target.feature_file.read_bytes()
        except FileNotFoundError:
            feature_raw = None
        feature_text = (feature_raw or b"").decode("utf-8", errors="strict")
        parse_toml(target.feature_file, feature_text)
    out = []
    new, changes = with_ours(data, command)
    if changes:
        out.append(_changed(target.hooks_file, raw, json_text(new), write))
        out += [f"  {change}" for change in changes]
        out.append(f"  command: {command}")
    if target.feature_file is not None and (enable_hooks_text(feature_text) != feature_text):
        enabled = enable_hooks_text(feature_text)
        try:
            switched_on = hooks_enabled(parse_toml(target.feature_file, enabled))
        except SettingsError:  # e.g. features = {...} inline: a [features] table cannot be added
            switched_on = False
        if not switched_on:
            raise SettingsError(f"could not switch Codex hooks on in {target.feature_file} without rewriting it; "
                                f"put `{FEATURE_LINE}` under its [features] table by hand.")
        out.append(_changed(target.feature_file, feature_raw, enabled.encode(), write))
        out.append(f"  set {FEATURE_LINE} under [features] (and dropped the deprecated {OLD_FEATURE_KEY}, if "
                   "persmem had set it)")
    return out or [f"{target.hooks_file}: nothing to change, the persmem hooks are installed"]


def token_path(agent: str, environ=os.environ) -> str:
    """Where the agent's token for `--url` hooks lives: $XDG_CONFIG_HOME/persmem/hook-token-<agent>."""
    if not agent or not all(c.isalnum() or c in "._-" for c in agent) or agent.startswith("."):
        raise SettingsError(f"--agent {agent!r} is not an agent name (letters, digits, '.', '_', '-')")
    config = os.path.expanduser(environ.get("XDG_CONFIG_HOME") or "~/.config")
    return os.path.join(config, "persmem", f"hook-token-{agent}")


def save_token(path: str, token: str) -> None:
    """`token` into `path`, mode 0600, in a folder of mode 0700 (made if missing); never anywhere else."""
    folder = os.path.dirname(path)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    write_file(path, (token.strip() + "\n").encode())
    os.chmod(path, 0o600)


def ask_token(options: dict, environ, stdin) -> str:
    """The agent's token: --token-file, else $PERSMEM_TOKEN, else typed (hidden) or piped on stdin."""
    if options.get("token_file"):
        with open(os.path.expanduser(options["token_file"]), encoding="utf-8") as file:
            token = file.read().strip()
    elif environ.get(TOKEN_ENV):
        token = environ[TOKEN_ENV].strip()
    elif stdin.isatty():
        import getpass

        token = getpass.getpass("the agent's persmem token (from `persmem agent add` on the server): ").strip()
    else:
        token = stdin.readline().strip()
    if not token or any(c.isspace() for c in token):
        raise SettingsError(f"no token: pipe it on stdin, set ${TOKEN_ENV} or pass --token-file PATH")
    return token


def check_remote(url: str, token: str) -> str:
    """One request with `token` before anything is written: a line saying whether the server takes it;
    SettingsError when it refuses it (the hooks would send nothing)."""
    try:
        server = Server({"url": url}, {TOKEN_ENV: token}, time.monotonic() + 5)
        try:
            server.request("GET", "/sessions/capture/claude/persmem-install-check")
        finally:
            server.close()
    except Exception as exc:  # reported, not fatal: the server may just be down right now
        text = str(exc) if isinstance(exc, HookFailed) else _explain(exc)
        if "HTTP 401" in text or "HTTP 403" in text:
            raise SettingsError(f"{url} refused the token ({text}); nothing was written. Run the install again "
                                "with the agent's current token (`persmem agent token NAME` on the server issues "
                                "a new one)") from None
        return f"could not check the token with {url} yet ({text}); the hooks will work once it answers"
    return f"{url} accepts the token"


def install_remote(url: str, agent: str, target: str, token: str, python: str, script: str, write=write_file,
                   environ=os.environ, package: str = "") -> list:
    """Hooks that reach the server at `url` as `agent`: the token saved 0600 (never in a settings file), the
    entries merged into the chosen clients' settings."""
    split_url(url)
    url = url.rstrip("/")  # https://box/ and https://box are one server: one command
    chosen = chosen_targets(target, environ)
    path = token_path(agent, environ)
    save_token(path, token)
    out = [f"{path}: the agent's token (mode 600; the hooks read it at each run)"]
    for t in chosen:
        out += install_target(t, hook_command(python, script, t.client, ["--url", url, "--token-file", path],
                                              package), write)
    return out


def install_main(argv) -> int:
    """`python3 hook.py install --url URL --agent NAME [--target ...] [--token-file PATH]` on a machine without
    persmem: this very file becomes the hook (keep it where it is)."""
    try:
        options = parse_options(argv, {"--url": "required", "--agent": "required", "--target": None,
                                       "--token-file": None})
        target = options.get("target", "all")
        if target not in ("claude", "codex", "all"):
            raise UsageError(f"--target is claude, codex or all\n{USAGE}")
        token = ask_token(options, os.environ, sys.stdin)
        checked = check_remote(options["url"], token)
        lines = install_remote(options["url"], options["agent"], target, token, sys.executable, __file__)
        lines.append(checked)
    except (UsageError, SettingsError, HookFailed, OSError) as exc:
        sys.stderr.write(f"persmem hook install: {exc}\n")
        return 2
    print("\n".join(lines))
    codex_file = str(targets()["codex"].hooks_file)
    if any(line.startswith(codex_file) and "nothing to change" not in line for line in lines):
        print("  Codex asks you to review and trust new hooks before they run: open /hooks in Codex.")
    return 0


def uninstall_main(argv) -> int:
    """`python3 hook.py uninstall [--target ...]`: our handlers out of the clients' settings (each file backed up
    first; everything else kept). With persmem installed, `persmem hooks uninstall` also restores from backups."""
    try:
        target = parse_options(argv, {"--target": None}).get("target", "all")
        chosen = list(targets().values()) if target == "all" else [targets()[target]]
        lines = []
        for t in chosen:
            raw, data = read_json(t.hooks_file)
            new, events = without_ours(data)
            if events:
                lines += [_changed(t.hooks_file, raw, json_text(new), write_file),
                          f"  removed the persmem hooks from {', '.join(events)}"]
            else:
                lines.append(f"{t.hooks_file}: no persmem hooks, nothing to change")
    except (UsageError, SettingsError, KeyError, OSError) as exc:
        sys.stderr.write(f"persmem hook uninstall: {exc}\n")
        return 2
    print("\n".join(lines + ["the token files in ~/.config/persmem/ (hook-token-*) are yours to delete"]))
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["install"]:
        return install_main(argv[1:])
    if argv[:1] == ["uninstall"]:
        return uninstall_main(argv[1:])
    return hook_main(argv)


if __name__ == "__main__":
    sys.exit(main())
