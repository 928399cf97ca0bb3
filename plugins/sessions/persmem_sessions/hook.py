"""The command Claude Code and Codex run on their hook events: a thin, fail-open client of the running server.

    python -m persmem_sessions.hook --client claude|codex [--agent NAME] [--home PATH] [--url URL]

The client writes the event as JSON on stdin (session_id, transcript_path, cwd, hook_event_name, and per event
source / prompt / trigger / reason). By `hook_event_name`:
- SessionStart      POST /sessions/briefing, print its context for the client to add to the session.
- UserPromptSubmit  POST /sessions/recall, print the memories relevant to this prompt (if any).
- Stop, PreCompact, SessionEnd: send the transcript's lines the server does not have yet (GET how many it has,
  POST the rest in batches under ~1 MB). A Codex event may carry no transcript_path: then the session's rollout
  is looked up under $CODEX_HOME/sessions by its id.

Printed: `{"hookSpecificOutput": {"hookEventName": ..., "additionalContext": ...}}`, and only when there is
context to add. It reaches the server on the home's local socket, as the agent in `X-Persmem-Agent` (no token:
the socket is the user's own, mode 0600), or with `--url` over HTTP(S) with the token in $PERSMEM_TOKEN.

The socket is trusted only when it is the user's own (`trusted_socket`), checked before a byte is sent: a home
whose path is too long for a socket name puts it in a shared place, `/tmp/persmem-<uid>/`, which another local
user can create first and listen in (and so receive every prompt). The folder must be a real folder (not a link)
of this user with no access for group or others, the home must be writable by nobody else, the socket must be
this user's, and the process listening on it must run as this user (SO_PEERCRED; root is not taken either: a
server for this user runs as this user, and a root-owned one would be a mistake to point out, not a peer). Anything
else sends nothing and prints one line naming what to remove (on stderr, and to the user as the client's
`systemMessage`); the hook still exits 0 and the session goes on.

Fail open, always: whatever goes wrong (no server, a slow one, a refusal, bad JSON on stdin or in the answer, a
missing transcript) the hook exits 0 with nothing on stdout, within its own deadline for the event, well under
the timeout `persmem hooks install` gives the client. A client must never wait on, or show errors from, its
memory. With PERSMEM_HOOK_DEBUG=1 it writes one short line to stderr saying what happened (never a secret).

Started on every prompt, so it imports only the standard library: `persmem_core` costs about 20 ms more per
start (msgspec, pluggy), so the socket's path is computed here as `persmem_core.transport.ownership.socket_path` does
(tests/test_hooks_client.py checks the two agree).
"""

from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import signal
import socket
import stat
import struct
import sys
import time
from urllib.parse import quote, urlsplit

from .projects import git_root  # the standard library only, like this module

# Each event's whole wall time, process start excluded; the client's timeout (installer.py) leaves a margin for
# the start on a loaded machine: 2 s at least, 1 s for SessionEnd (Codex caps its timeout at 3 s).
DEADLINES = {"SessionStart": 3.0, "UserPromptSubmit": 1.5, "Stop": 2.5, "PreCompact": 2.5, "SessionEnd": 2.0}
DEFAULT_DEADLINE = 1.5  # until the event is known
CAPTURE_EVENTS = ("Stop", "PreCompact", "SessionEnd")
BATCH_BYTES = 900_000  # one POST's JSON stays under the 1 MB the server takes per capture
LONG_STRING = 16_000  # a transcript line too big for one batch has its strings cut to this many characters
MAX_STDIN = 8 * 1024 * 1024
MAX_PROMPT = 20_000  # recall searches with the prompt's start; a pasted log is not a better query
AGENT_HEADER = "X-Persmem-Agent"
TOKEN_ENV = "PERSMEM_TOKEN"
DEBUG_ENV = "PERSMEM_HOOK_DEBUG"

# as in persmem_core.transport.ownership (copied, see the module docstring)
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
    """Where the owner of `home` listens: persmem_core.transport.ownership.socket_path, without creating anything."""
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


def context_output(event_name: str, context) -> str:
    """What the client adds to the session: nothing unless there is text to add."""
    if not isinstance(context, str) or not context.strip():
        return ""
    # ASCII only: the client's locale may not be UTF-8, and JSON's \\u escapes carry every character
    return json.dumps({"hookSpecificOutput": {"hookEventName": event_name, "additionalContext": context}})


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
    prompt = prompt[:MAX_PROMPT]
    _, answer = server.request("POST", "/sessions/recall", {
        "client": client, "session_id": event["session_id"], "cwd": event.get("cwd") or "", "repo": repo_of(event),
        "prompt": prompt})
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
    return len(json.dumps(line, ensure_ascii=False).encode())


def fit_line(line: str) -> str:
    """A transcript line small enough for one batch: as it is, else (a pasted image, a huge tool output) the same
    JSON with its long strings cut, else a note saying a line was left out. Every line is sent, so the server's
    line count keeps matching the file's."""
    if json_size(line) < BATCH_BYTES // 2:
        return line
    try:  # RecursionError: a line nested deeper than the parser (or _cut_strings) goes is left out below
        value = _cut_strings(json.loads(line))
        cut = json.dumps(value, ensure_ascii=False)
        if not cut.isascii():
            try:
                cut.encode()
            except UnicodeEncodeError:  # a lone surrogate (a string cut inside an emoji): keep it escaped
                cut = json.dumps(value)
    except (ValueError, RecursionError):
        cut = ""
    if cut and json_size(cut) < BATCH_BYTES // 2:
        return cut
    return json.dumps({"type": "persmem-omitted", "bytes": len(line.encode()),
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


def capture(server: Server, client: str, event: dict, environ) -> str:
    """Send the lines the server has not archived yet, oldest first, as many batches as the deadline allows (the
    rest goes with the next event)."""
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


def read_event(stdin) -> dict:
    raw = stdin.read(MAX_STDIN + 1)
    if len(raw) > MAX_STDIN:
        raise HookFailed("the event on stdin is too large")
    event = json.loads(raw)
    if not isinstance(event, dict):
        raise HookFailed("the event on stdin is not a JSON object")
    if not isinstance(event.get("session_id"), str) or not event["session_id"]:
        raise HookFailed("the event has no session_id")
    return event


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="python -m persmem_sessions.hook", add_help=True)
    parser.add_argument("--client", choices=("claude", "codex"), required=True)
    parser.add_argument("--agent", help="the agent to speak for on the local socket (default: the server's)")
    parser.add_argument("--home", help="the persmem home whose server to reach (default: $PERSMEM_HOME)")
    parser.add_argument("--url", help=f"reach the server over HTTP(S) at this base URL, with ${TOKEN_ENV}")
    return parser.parse_args(argv)


def run(argv, stdin, environ, started: float) -> str:
    """The text to print (may be empty); raises on any failure."""
    args = parse_args(argv)
    event = read_event(stdin)
    name = event.get("hook_event_name")
    if name not in DEADLINES:
        return ""  # an event these hooks were not installed for: nothing to do
    deadline = started + DEADLINES[name]
    signal.setitimer(signal.ITIMER_REAL, max(deadline - time.monotonic(), 0.01))
    server = Server(args, environ, deadline)
    try:
        if name == "SessionStart":
            return briefing(server, args.client, event)
        if name == "UserPromptSubmit":
            return recall(server, args.client, event)
        return capture(server, args.client, event, environ)
    finally:
        server.close()


def _out_of_time(signum, frame):
    """The deadline passed: leave at once, exit 0, nothing on stdout (whatever the hook was doing)."""
    if os.environ.get(DEBUG_ENV) == "1":
        os.write(2, b"persmem hook: out of time\n")
    os._exit(0)


def main(argv=None) -> int:
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
    except SystemExit as exc:  # argparse: bad arguments (its usage line goes to stderr, which the client hides)
        outcome = f"bad arguments ({exc.code})"
    except Untrusted as exc:  # nothing was sent; the user must hear of it (the session goes on)
        signal.setitimer(signal.ITIMER_REAL, 0)
        warning = f"persmem hook: sent nothing: {exc}"
        sys.stderr.write(warning + "\n")
        sys.stdout.write(json.dumps({"systemMessage": warning}) + "\n")
        sys.stdout.flush()
        return 0
    except BaseException as exc:  # fail open: the client's session must not notice
        signal.setitimer(signal.ITIMER_REAL, 0)
        outcome = str(exc) if isinstance(exc, HookFailed) else type(exc).__name__
    if debug:
        sys.stderr.write(f"persmem hook: {outcome[:200]} in {(time.monotonic() - started) * 1000:.0f} ms\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
