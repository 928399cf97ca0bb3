"""`persmem sessions import`: backfill the sessions Claude Code and Codex already wrote on this machine.

Each transcript file is sent to the home's owner exactly as the client hooks send one (the capture protocol of
web.py): ask how many of its lines are archived, send the rest in batches. So an import run twice, or after the
hooks captured part of a session, stores nothing twice. Where no server owns the home, the command owns it
for its length (like `persmem dashboard`) and talks to its own socket, so there is one way in.

Formats followed (see docs/sessions.md): Claude Code 2.x transcripts (`~/.claude/projects/<folder>/<session
id>.jsonl`: one JSON object per line with `sessionId`, `cwd`, `type`, `message`, ...; sub-agent transcripts
`agent-*.jsonl` / `isSidechain` are part of their parent session and are not imported on their own) and Codex
CLI rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-<time>-<uuid>.jsonl`: `{"timestamp", "type":
"session_meta"|"response_item"|"turn_context"|"event_msg", "payload"}` since 0.4x; before that a first line
`{"id", "timestamp", "instructions", ...}` followed by bare items).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from . import hook

SESSION_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}\Z")  # what the server accepts (web.py)
UUID_TAIL = re.compile(r"([0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12})$")
CWD_TAG = re.compile(r"<cwd>([^<\n]{1,4096})</cwd>")  # Codex's environment_context, in its older rollouts
CAPTURE_TIMEOUT = 120.0  # one batch is archived (fsync'd) before the answer; a slow disk must not fail an import


class SkippedFile(Exception):
    """A file that is not a transcript we can import; the message says why, in a few words."""


@dataclass
class Transcript:
    client: str  # "claude" | "codex"
    path: Path
    session_id: str
    cwd: str
    lines: list[str]


@dataclass
class ImportReport:
    sessions: int = 0  # transcripts sent (new or already archived)
    new_sessions: int = 0  # transcripts of which at least one line was archived now
    lines: int = 0  # lines archived by this run
    redactions: int = 0  # secrets redacted from those lines
    empty: int = 0  # transcripts with no complete line yet
    elsewhere: int = 0  # sessions already archived for another agent: left alone (import_owner.py)
    skipped: list[str] = field(default_factory=list)  # one line per file not imported: path and why

    def summary(self) -> str:
        skipped = f"{len(self.skipped) - self.elsewhere} file(s) skipped"
        skipped += f", {self.empty} empty" if self.empty else ""
        if self.elsewhere:
            skipped += f", {self.elsewhere} session(s) already archived for another agent left alone"
        if not self.lines:
            return (f"Nothing new: all {self.sessions} session(s) were already archived (0 lines archived; "
                    f"{skipped}).")
        return (f"Imported {self.sessions} session(s) ({self.new_sessions} with new lines): {self.lines:,} lines "
                f"archived, {skipped}, {self.redactions} secret(s) redacted.")


# ---------------------------------------------------------------------------------------------- finding files

def claude_root(environ=os.environ) -> Path:
    """Where Claude Code keeps its projects: $CLAUDE_CONFIG_DIR/projects, else ~/.claude/projects."""
    base = environ.get("CLAUDE_CONFIG_DIR")
    return (Path(base).expanduser() if base else Path.home() / ".claude") / "projects"


def codex_root(environ=os.environ) -> Path:
    """Where Codex keeps its sessions: $CODEX_HOME/sessions, else ~/.codex/sessions."""
    base = environ.get("CODEX_HOME")
    return (Path(base).expanduser() if base else Path.home() / ".codex") / "sessions"


def claude_files(path: Path) -> list[Path]:
    """A transcript, a project folder (`*.jsonl`) or the projects folder (`*/*.jsonl`); sub-agent transcripts
    (`agent-*.jsonl`, or in a session's `subagents/` folder) are left out: they belong to their parent."""
    if path.is_file():
        return [path]
    found = sorted(path.glob("*.jsonl")) + sorted(path.glob("*/*.jsonl"))
    return [p for p in found if not p.name.startswith("agent-")]


def codex_files(path: Path) -> list[Path]:
    """A rollout file, a Codex home (its `sessions/`) or a sessions folder: every `rollout-*.jsonl` below."""
    if path.is_file():
        return [path]
    if (path / "sessions").is_dir():
        path = path / "sessions"
    return sorted(path.rglob("rollout-*.jsonl"))


def find_transcripts(claude: list[Path], codex: list[Path]) -> list[tuple[str, Path]]:
    """(client, path) of every transcript under the given paths, each file once."""
    seen: set[Path] = set()
    found = []
    for client, paths, finder in (("claude", claude, claude_files), ("codex", codex, codex_files)):
        for root in paths:
            for path in finder(root):
                key = path.resolve()
                if key not in seen:
                    seen.add(key)
                    found.append((client, path))
    return found


# ---------------------------------------------------------------------------------------------- reading files

def read_transcript(client: str, path: Path) -> Transcript:
    """The transcript's lines exactly as the client hooks send them (hook.py: every complete line, a very long
    one cut to fit a batch), so the archive's line n is the file's line n whoever sent it; and its identity."""
    try:
        lines = list(hook.new_lines(str(path), 0))
    except OSError as exc:
        raise SkippedFile(f"unreadable ({exc.strerror or exc})") from None
    records = json_records(lines)
    if client == "claude":
        session_id, cwd = claude_identity(path, records)
    else:
        session_id, cwd = codex_identity(path, records)
    if lines and not session_id:
        raise SkippedFile("no session id usable as a name (letters, digits, . _ : -; up to 128) in the file or "
                          "its name")
    return Transcript(client, path, session_id, cwd, lines)


def json_records(lines: list[str]) -> Iterator[dict]:
    """The lines that are JSON objects, parsed as they are asked for; SkippedFile when the first non-blank line
    is not one (not a transcript: a later bad line is archived as it is, as the hooks do, and holds no turn)."""
    seen = False
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if isinstance(record, dict):
            seen = True
            yield record
        elif not seen:
            raise SkippedFile(f"not a JSONL transcript (line {number} is not a JSON object)")


def _valid(value) -> str:
    return value if isinstance(value, str) and SESSION_ID.match(value) else ""


def _text(value) -> str:
    return value if isinstance(value, str) and 0 < len(value) <= 4096 else ""


def claude_identity(path: Path, records: Iterator[dict]) -> tuple[str, str]:
    """The session id (the file's name, which is what Claude Code hands its hooks; else its `sessionId`) and the
    working folder (the first `cwd`)."""
    session_id, cwd, sidechain = _valid(path.stem), "", None
    for record in records:
        if sidechain is None and "isSidechain" in record:
            sidechain = record["isSidechain"] is True
        session_id = session_id or _valid(record.get("sessionId"))
        cwd = cwd or _text(record.get("cwd"))
        if session_id and cwd and sidechain is not None:
            break
    if sidechain:
        raise SkippedFile("a sub-agent transcript (part of its parent session)")
    return session_id, cwd


def codex_identity(path: Path, records: Iterator[dict]) -> tuple[str, str]:
    """The session id (`session_meta`'s payload id; in older rollouts the first line's id; else the uuid at the
    end of the file's name) and the working folder (`session_meta`, else `turn_context`, else the `<cwd>` of
    the environment context, in the first lines)."""
    session_id, cwd = "", ""
    for number, record in enumerate(records):
        payload = record.get("payload")
        if not isinstance(payload, dict):  # before 0.4x: a header line, then bare items
            if number == 0:
                session_id = _valid(record.get("id"))
            payload = record
        if record.get("type") in ("session_meta", "turn_context"):
            if record["type"] == "session_meta":
                session_id = session_id or _valid(payload.get("id"))
            cwd = cwd or _text(payload.get("cwd"))
        if not cwd and number < 20:  # the environment context comes first
            cwd = next((m.group(1).strip() for m in map(CWD_TAG.search, _texts(payload)) if m), "")
        if session_id and cwd:
            break
    if not session_id:
        match = UUID_TAIL.search(path.stem)
        session_id = match.group(1) if match else ""
    return session_id, cwd


def _texts(item: dict) -> Iterator[str]:
    content = item.get("content")
    for part in content if isinstance(content, list) else []:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            yield part["text"]


# ---------------------------------------------------------------------------------------------- sending

class CaptureRefused(Exception):
    """The server refused a capture; the message is its own (what is wrong and what to do)."""


class ImportStopped(Exception):
    """Nothing more can be imported (the agent is refused, the server has no /sessions, or went away)."""


class CaptureClient:
    """The capture protocol over the owner's local socket, as `agent` (None: the server's default agent; a dict:
    the agent of each client's sessions)."""

    def __init__(self, socket: Path, agent: str | dict[str, str] | None):
        import httpx2

        self.agents = agent if isinstance(agent, dict) else {client: agent for client in hook.CLIENTS}
        self.http = httpx2.Client(transport=httpx2.HTTPTransport(uds=str(socket)), base_url="http://persmem.local",
                                  timeout=CAPTURE_TIMEOUT)

    def _as(self, client: str) -> dict[str, str]:
        agent = self.agents.get(client)
        return {"X-Persmem-Agent": agent} if agent else {}

    def close(self) -> None:
        self.http.close()

    def archived_lines(self, client: str, session_id: str) -> int:
        response = self.http.get(f"/sessions/capture/{client}/{session_id}", headers=self._as(client))
        return int(self._json(response)["lines"])

    def send(self, transcript: Transcript, report: ImportReport) -> None:
        """Archive the lines the server does not have yet, in batches; a 409 (someone else, e.g. a hook, sent
        some meanwhile) restarts from the server's count."""
        done = self.archived_lines(transcript.client, transcript.session_id)
        new = False
        while done < len(transcript.lines):
            batch = next(hook.batches(transcript.lines[done:]))  # under the server's 1 MB
            body = {"client": transcript.client, "session_id": transcript.session_id, "cwd": transcript.cwd,
                    "repo": hook.repo_of({"cwd": transcript.cwd}), "first_line": done, "lines": batch,
                    "event": "import"}
            response = self.http.post("/sessions/capture", json=body, headers=self._as(transcript.client))
            if response.status_code == 409:
                done = int(self._json(response, ok=(409,))["lines"])
                continue
            answer = self._json(response)
            report.lines += int(answer.get("archived", len(batch)))
            report.redactions += int(answer.get("redactions", 0))
            new = True
            done = int(answer.get("total_lines", done + len(batch)))
        if done > len(transcript.lines):
            raise SkippedFile(f"the archive holds {done} lines of session {transcript.session_id} but the file has "
                              f"only {len(transcript.lines)}: it is not the transcript that was captured")
        report.sessions += 1
        report.new_sessions += new

    def indexing(self) -> tuple[int, int, bool]:
        """(turns archived, turns of them indexed, whether anything indexes) over the import's agents' sessions."""
        turns = indexed = 0
        indexes = True
        for agent in set(self.agents.values()):
            answer = self._json(self.http.get("/sessions/indexing", headers={"X-Persmem-Agent": agent} if agent
                                              else {}))
            turns += int(answer["turns"])
            indexed += int(answer["indexed_turns"])
            indexes = indexes and bool(answer["indexes"])
        return turns, indexed, indexes

    @staticmethod
    def _json(response, ok=(200,)) -> dict:
        try:
            data = response.json()
        except ValueError:
            data = {}
        if response.status_code not in ok or not isinstance(data, dict):
            message = data.get("error") if isinstance(data, dict) else None
            if isinstance(data, dict) and isinstance(data.get("error"), dict):  # a JSON-RPC error (agent refused)
                message = data["error"].get("message")
            if response.status_code == 404 and not message:
                raise ImportStopped("the server owning this home has no /sessions endpoints: restart it after "
                                    "installing persmem-plugin-sessions")
            if response.status_code in (401, 403):
                raise ImportStopped(message or "the server refused this agent")
            raise CaptureRefused(message or f"the server answered {response.status_code}")
        return data


def import_all(capture: CaptureClient, files: list[tuple[str, Path]], progress=None,
               owners: dict[tuple[str, str], str] | None = None) -> ImportReport:
    """Send every transcript; bad files are skipped with one line each, and sessions `owners` (client, session id
    -> agent) files under another agent than the import's (the same session, captured by its hooks) with one line
    each. `progress(n)` after each file."""
    import httpx2

    report = ImportReport()
    for client, path in files:
        try:
            transcript = read_transcript(client, path)
            owner = (owners or {}).get((client, transcript.session_id))
            if not transcript.lines:
                report.empty += 1
            elif owner is not None and owner != capture.agents.get(client):
                report.elsewhere += 1
                report.skipped.append(f"skipped {path}: session {transcript.session_id} is already archived for "
                                      f"agent {owner} (captured by its hooks or imported as it); not archived again "
                                      f"as {capture.agents.get(client)}")
            else:
                capture.send(transcript, report)
        except SkippedFile as exc:
            report.skipped.append(f"skipped {path}: {exc}")
        except CaptureRefused as exc:
            report.skipped.append(f"skipped {path}: the server refused it: {exc}")
        except httpx2.TransportError as exc:
            raise ImportStopped(f"lost the connection to the server while sending {path} ({exc}); run the "
                                f"import again: it goes on where it stopped") from None
        if progress is not None:
            progress(1)
    return report


# ---------------------------------------------------------------------------------------------- the command

def run_import(host, claude: list[Path], codex: list[Path], agent: str | None) -> ImportReport:
    """Import through the home's owner; with no owner, own the home for the import's length (as `persmem
    dashboard` does) and talk to this process's own socket. Progress on stderr."""
    import click

    from persmem_core.sdk import OwnerCard
    from persmem_core.sdk import socket_path
    from persmem_core.sdk import holding_home, owner_card

    from .import_owner import archived_owners, import_agents
    from .service import DATA_FOLDER

    files = find_transcripts(claude, codex)
    clients = {client for client, _ in files}
    if agent is None:
        agents, why = import_agents(host, clients)
        for line in why:
            click.echo(line, err=True)
    else:
        agents = {client: agent for client in clients}
    owners = archived_owners(host.home / DATA_FOLDER, host.sealer)
    if owner_card(host) is not None:
        return _import_through(socket_path(host.home), files, agents, owners, holding=False)
    with holding_home(host, OwnerCard(role="sessions import")) as open_socket:
        host.startup()
        try:
            open_socket()
            return _import_through(socket_path(host.home), files, agents, owners, holding=True)
        finally:
            host.shutdown()


def _import_through(socket: Path, files: list[tuple[str, Path]], agents: dict[str, str],
                    owners: dict[tuple[str, str], str], holding: bool) -> ImportReport:
    """Send the files, then follow the indexing of the new turns to the end (indexing_progress.py): a search
    right after the import finds them. `holding`: this process is the server for the import's length."""
    import click

    from .indexing_progress import follow_indexing

    # a command's output, not a server's log: a line per request (httpx) or per start would drown the summary
    # (set here: starting the MCP server configures logging again)
    logging.getLogger().setLevel(max(logging.WARNING, logging.getLogger().level))

    capture = CaptureClient(socket, agents)
    try:
        with click.progressbar(length=len(files), label=f"Importing {len(files)} transcript(s)", file=_stderr(),
                               show_pos=True) as bar:
            report = import_all(capture, files, bar.update, owners)
        if report.lines:
            follow_indexing(capture.indexing, holding)
        return report
    finally:
        capture.close()


def _stderr():
    import click

    return click.get_text_stream("stderr")
