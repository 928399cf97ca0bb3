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
context to add. The server is reached through hook_connection.py: on the home's local socket, only when the socket
and the process on it are the user's own, or with `--url` over HTTP(S). A socket that is not the user's gets
nothing: the hook prints one line naming what to remove (on stderr, and to the user as the client's
`systemMessage`); it still exits 0 and the session goes on.

Fail open, always: whatever goes wrong (no server, a slow one, a refusal, bad JSON on stdin or in the answer, a
missing transcript) the hook exits 0 with nothing on stdout, within its own deadline for the event, well under
the timeout `persmem hooks install` gives the client. A client must never wait on, or show errors from, its
memory. With PERSMEM_HOOK_DEBUG=1 it writes one short line to stderr saying what happened (never a secret).

Started on every prompt, so it imports only the standard library (and the modules of this package that do the
same): `persmem_core` costs about 20 ms more per start (msgspec, pluggy).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from urllib.parse import quote

from .hook_connection import TOKEN_ENV, HookFailed, Server, Untrusted
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
DEBUG_ENV = "PERSMEM_HOOK_DEBUG"


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
