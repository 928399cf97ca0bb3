"""Trust persmem's Codex hooks through Codex's own interface, and tell which of them Codex does not trust yet.

Codex runs a non-managed hook only once the user has trusted it (its `/hooks` screen), keyed by the hook's
current hash; an untrusted or modified hook is skipped silently (always in `codex exec`). The hash is Codex's
business: this module never computes it. It starts `codex app-server` (JSON-RPC, one JSON object a line on
stdio), asks `hooks/list` for every hook with its `key`, `currentHash` and `trustStatus`, and for persmem's own
hooks (the command runs persmem_sessions' client, hook.is_ours) writes `hooks.state.<key>.trusted_hash =
<currentHash>` with Codex's config writer (`config/value/write`, upsert into `$CODEX_HOME/config.toml`), the
record the `/hooks` screen keeps. The user's other hooks are never trusted here.

The codex program: $PERSMEM_CODEX_BIN if set, else `codex` on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from persmem_core.sdk import UserError

from .hook import is_ours

TIMEOUT = 30.0


def codex_program(environ=os.environ) -> str:
    """The codex binary: $PERSMEM_CODEX_BIN, else `codex` on the environment's PATH; UserError when neither."""
    named = environ.get("PERSMEM_CODEX_BIN")
    found = named or shutil.which("codex", path=environ.get("PATH"))
    if not found:
        raise UserError("codex is not on PATH, so persmem cannot ask it to trust the hooks: install Codex "
                        "(npm install -g @openai/codex) or set PERSMEM_CODEX_BIN to its path, then run "
                        "`persmem hooks install --target codex` again (or trust them in Codex's /hooks screen).")
    return found


class AppServer:
    """One `codex app-server` over stdio, initialized; requests answered in order of their id."""

    def __init__(self, codex_home: Path, environ=os.environ):
        env = dict(environ) | {"CODEX_HOME": str(codex_home)}
        self.process = subprocess.Popen([codex_program(environ), "app-server"], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
                                        cwd=str(codex_home))
        self.next_id = 0
        self.request("initialize", {"clientInfo": {"name": "persmem", "title": "persmem hooks", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "initialized"})

    def send(self, message: dict) -> None:
        self.process.stdin.write(json.dumps(message) + "\n")
        self.process.stdin.flush()

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        while True:
            line = self.process.stdout.readline()
            if not line:
                raise UserError(f"codex app-server ended before answering {method} (exit {self.process.poll()}): "
                                "check that `codex --version` runs, then try again, or trust the hooks in /hooks.")
            message = json.loads(line)
            if message.get("id") != self.next_id or "method" in message:
                continue  # a notification or a request of the server's own
            if "error" in message:
                raise UserError(f"codex app-server refused {method}: {message['error'].get('message')}")
            return message["result"]

    def close(self) -> None:
        try:
            self.process.stdin.close()
            self.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> "AppServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def our_hooks(server: AppServer, codex_home: Path) -> list[dict]:
    """hooks/list's entries whose command is persmem's client (seen from the Codex home's folder)."""
    answer = server.request("hooks/list", {"cwds": [str(codex_home)]})
    seen: dict[str, dict] = {}
    for group in answer.get("data", []):
        for hook in group.get("hooks", []):
            if hook.get("handlerType") == "command" and is_ours({"type": "command", "command": hook["command"]}):
                seen.setdefault(hook["key"], hook)
    return list(seen.values())


def untrusted_hooks(codex_home: Path, environ=os.environ) -> list[dict]:
    """persmem's hooks Codex would skip now (trustStatus untrusted or modified), as hooks/list gives them
    (key, eventName, trustStatus, currentHash, ...). For doctor."""
    with AppServer(codex_home, environ) as server:
        return [hook for hook in our_hooks(server, codex_home)
                if hook.get("trustStatus") in ("untrusted", "modified")]


def trust_our_hooks(codex_home: Path, environ=os.environ) -> list[str]:
    """Trust each of persmem's hooks Codex does not trust yet, at the hash Codex reports; lines saying what was
    done. The user's other hooks are left as they are."""
    codex_home = Path(codex_home)
    with AppServer(codex_home, environ) as server:
        pending = [hook for hook in our_hooks(server, codex_home)
                   if hook.get("trustStatus") in ("untrusted", "modified")]
        if not pending:
            return [f"{codex_home / 'config.toml'}: Codex already trusts persmem's hooks"]
        state = {hook["key"]: {"trusted_hash": hook["currentHash"]} for hook in pending}
        server.request("config/value/write", {"keyPath": "hooks.state", "value": state, "mergeStrategy": "upsert"})
        still = {hook["key"] for hook in our_hooks(server, codex_home) if hook.get("trustStatus") != "trusted"}
    if still:
        raise UserError(f"Codex still does not trust {', '.join(sorted(still))} after persmem wrote its trust: "
                        "open /hooks in Codex and trust them there.")
    events = ", ".join(sorted(hook["eventName"] for hook in pending))
    return [f"{codex_home / 'config.toml'}: trusted persmem's Codex hooks ({events}) through codex app-server"]


def after_install(codex_home: Path, environ=os.environ) -> list[str]:
    """For `persmem hooks install --target codex`: trust the installed hooks, or, when Codex cannot be asked
    (not installed, refused), the reason and the manual way (/hooks). Never raises."""
    try:
        return trust_our_hooks(codex_home, environ)
    except (UserError, OSError, ValueError) as exc:
        return [str(exc), "Codex asks you to review and trust new hooks before they run: open /hooks in Codex."]


def doctor_checks(environ=os.environ) -> list:
    """persmem doctor: WARN when Codex would skip a persmem hook (untrusted or changed since trusted) or cannot be
    asked; PASS when it trusts them all; nothing when no persmem hook is in Codex's hooks.json."""
    from persmem_core.sdk import pass_, warn

    from .hook import targets

    codex = targets(environ)["codex"]
    try:
        if not codex.hooks_file.is_file() or not any(is_ours({"type": "command", "command": line})
                                                      for line in codex.hooks_file.read_text().splitlines()):
            return []
        pending = untrusted_hooks(codex.folder, environ)
    except (UserError, OSError, ValueError) as exc:
        return [warn("codex hooks trust", str(exc))]
    if pending:
        events = ", ".join(sorted(f"{hook['eventName']} ({hook['trustStatus']})" for hook in pending))
        return [warn("codex hooks trust", f"Codex skips these persmem hooks until they are trusted: {events}. "
                     "Run `persmem hooks install --target codex` (it trusts them) or open /hooks in Codex.")]
    return [pass_("codex hooks trust", f"Codex trusts persmem's hooks in {codex.hooks_file}")]
