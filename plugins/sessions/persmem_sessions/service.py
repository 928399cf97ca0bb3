"""The sessions of this host: the archive, what each session was already told, and the indexing worker.

- `open_service(host)` opens it at startup (the `startup` hook puts it in `host.state`); `service(host)` is
  how tools and routes get it (NotReady before startup or after shutdown); `close()` stops the worker.
- Capture: the client hooks send a transcript's new lines (`capture`); they are redacted (redact.py), then
  archived durably (archive.py; sealed with the home's key when [encryption] is on) before the answer, and the
  session is queued for indexing.
- Indexing: a background thread hands the new turns to the `index_session_turns` hook (the memory plugin
  answers it) and records how far it got in the session's metadata (`indexed_lines`), so after a restart it
  resumes from the archive. Without any plugin answering the hook, nothing is indexed and nothing is lost:
  the marks stay where they are until one is installed. Sessions take turns; one whose step fails waits its
  own backoff at the back of the queue, so a session the memory side refuses never holds up the others.
- Briefing and recall: built from the `briefing_sections` and `recall_for_prompt` hooks (briefing.py composes the
  text, framed as data and made inert); the memory ids each session received are remembered here (in memory only:
  a restart may repeat one), so recall never repeats what this session already has.
- Projects: from the working folder the client reports (projects.py); the server looks at its own disk for
  it only inside the [workspace] roots, so a caller learns nothing about folders outside them.
"""

from __future__ import annotations

import logging
import math
import os
import threading
import time
from collections import OrderedDict
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from persmem_core.sdk import UserError, session_start_sections

from . import archive
from .archive import SessionMeta
from .briefing import briefing_text, recall_text
from .projects import project_for
from .redact import redact_line
from .transcripts import CLIENTS, cut, line_turns, valid_text

log = logging.getLogger("persmem.sessions")

NAME = "sessions"  # the plugin's entry-point name: its key in host.state
DATA_FOLDER = "sessions"  # <home>/sessions
INDEX_LINES_PER_STEP = 500  # lines read, parsed and handed to the memory side at once
RETRY_SECONDS = (1, 2, 5, 10, 30)  # waits after a failed indexing step (the memory plugin may still be starting)
DELIVERED_SESSIONS = 2000  # sessions whose delivered memory ids are remembered (the oldest are forgotten)
TITLE_CHARS = 120
PROMPT_CHARS = 4000  # the start of a prompt is what recall searches with
NOTHING_INDEXES = "nothing indexes"


class CaptureConflict(UserError):
    """A capture that does not start where the archive ends; the client resends from `lines`."""

    def __init__(self, message: str, lines: int):
        super().__init__(message)
        self.lines = lines


def data_folder(host) -> Path:
    folder = host.data_dir(DATA_FOLDER)
    os.chmod(folder, 0o700)
    return folder


def open_service(host) -> SessionsService:
    return SessionsService(host, data_folder(host)).start()


def service(host) -> SessionsService:
    return host.state.get(NAME)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


class SessionsService:
    def __init__(self, host, folder: Path):
        self.host, self.folder = host, folder
        self.config = host.section("sessions")
        self.sealer = host.sealer  # archives and metadata are sealed at rest when [encryption] is on
        self._metas: dict[tuple[str, str, str], tuple[Path, SessionMeta]] = {}  # (agent, client, id)
        self._locks: dict[tuple[str, str, str], threading.Lock] = {}
        self._lock = threading.Lock()
        self._delivered: OrderedDict[tuple[str, str, str], set[str]] = OrderedDict()
        self._pending: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._retry: dict[tuple[str, str, str], tuple[float, int]] = {}  # key -> (monotonic time due, failures)
        self._failure_kinds: set[str] = set()  # exception kinds already logged by the indexing worker
        self._wake = threading.Condition(self._lock)
        self._stopping = False
        self._worker: threading.Thread | None = None
        self.index_errors = 0
        self._roots: tuple[list[str], list[str]] | None = None  # where a project may be looked up (projects.py)

    # -- lifecycle ------------------------------------------------------------------------------------------
    def start(self) -> SessionsService:
        for base, meta in archive.scan(self.folder, self.sealer, repair=True):
            key = (meta.agent, meta.client, meta.session_id)
            self._metas[key] = (base, meta)
            if meta.indexed_lines < meta.lines:
                self._pending[key] = None
        self._worker = threading.Thread(target=self._index_loop, name="persmem-sessions-index", daemon=True)
        self._worker.start()
        return self

    def close(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify_all()
        if self._worker is not None:
            self._worker.join(timeout=10)

    def _session_lock(self, key) -> threading.Lock:
        with self._lock:
            return self._locks.setdefault(key, threading.Lock())

    # -- capture --------------------------------------------------------------------------------------------
    def line_count(self, agent: str, client: str, session_id: str) -> int:
        entry = self._metas.get((agent, client, session_id))
        return entry[1].lines if entry else 0

    def capture(self, agent: str, client: str, session_id: str, cwd: str, first_line: int,
                lines: list[str], repo: str = "") -> dict:
        """Archive `lines` (the transcript's lines from `first_line` on), redacted, durably. A capture that
        does not start at the archived count raises CaptureConflict naming it (nothing is written)."""
        key = (agent, client, session_id)
        cleaned, found = [], 0
        for number, line in enumerate(lines):
            line = line.removesuffix("\n").removesuffix("\r")
            if "\n" in line or "\r" in line:
                raise UserError(f"lines[{number}] holds a line break: send each JSONL line of the transcript as one "
                                "item of `lines`, without its line break.")
            text, count = redact_line(valid_text(line))  # a lone surrogate sent as is could never be written
            cleaned.append(text)
            found += count
        cwd = valid_text(cwd)
        with self._session_lock(key):
            base, stored = self._metas.get(key) or self._new_session(agent, client, session_id, cwd, repo)
            if first_line != stored.lines:
                raise CaptureConflict(f"this session has {stored.lines} lines archived, and this capture starts at "
                                      f"line {first_line}: send the lines from {stored.lines} on.", stored.lines)
            meta = stored
            if cleaned:
                # On a copy: the counts this capture adds become the session's only once its lines and metadata
                # are on disk (a failed write leaves the known state, and the next capture starts from it).
                meta = msgspec.structs.replace(stored)
                self._add_turn_facts(meta, cleaned)
                meta.redactions += found
                meta.captures += 1
                if cwd and not meta.cwd:
                    meta.cwd = cwd
                archive.append_lines(base, meta, cleaned, self.sealer)
                self._metas[key] = (base, meta)
                self._queue(key)
        return {"archived": len(cleaned), "total_lines": meta.lines, "redactions": found, "project": meta.project}

    def _new_session(self, agent, client, session_id, cwd, repo="") -> tuple[Path, SessionMeta]:
        project = self.project(cwd, repo)
        base = archive.base_path(self.folder, agent, project, client, session_id)
        return base, SessionMeta(agent=agent, client=client, session_id=session_id, project=project, cwd=cwd)

    def _add_turn_facts(self, meta: SessionMeta, lines: list[str]) -> None:
        now = _now()
        times = []
        for line in lines:
            for turn in line_turns(meta.client, line, self.config.tool_output_chars):
                meta.turns += 1
                if turn["time"]:
                    times.append(turn["time"])
                if not meta.title and turn["role"] == "user":
                    meta.title = valid_text(cut(" ".join(turn["text"].split()), TITLE_CHARS))
        meta.first_time = meta.first_time or (times[0] if times else now)
        meta.last_time = times[-1] if times else now

    # -- indexing -------------------------------------------------------------------------------------------
    def _queue(self, key) -> None:
        with self._wake:
            self._pending[key] = None
            self._wake.notify_all()

    def pending(self) -> int:
        """Sessions with turns not indexed yet."""
        with self._lock:
            return len(self._pending)

    def indexing(self, agent: str) -> dict:
        """How far the indexing of `agent`'s own sessions has got (what a progress bar shows): turns archived,
        turns of them searchable, sessions still waiting, and whether any plugin indexes at all (without one,
        turns are archived and wait for it)."""
        metas = [meta for (owner, _, _), (_, meta) in list(self._metas.items()) if owner == agent]
        with self._lock:
            waiting = sum(1 for owner, _, _ in self._pending if owner == agent)
        return {"turns": sum(meta.turns for meta in metas), "indexed_turns": sum(meta.indexed_turns for meta in metas),
                "sessions": len(metas), "sessions_waiting": waiting,
                "indexes": bool(self.host.hook.index_session_turns.get_hookimpls())}

    def _next_to_index(self):
        """The first pending session not waiting out a failure, else how long until one is due (called with the
        lock held)."""
        now = time.monotonic()
        soonest = None
        for key in self._pending:
            due = self._retry.get(key, (0.0, 0))[0]
            if due <= now:
                return key, None
            soonest = due if soonest is None else min(soonest, due)
        return None, (None if soonest is None else soonest - now)

    def _index_loop(self) -> None:
        """Index pending sessions in turn. A session whose step fails goes to the back of the queue and waits its
        own backoff (RETRY_SECONDS): one session the memory side refuses never holds up any other."""
        while True:
            with self._wake:
                while True:
                    if self._stopping:
                        return
                    key, wait = self._next_to_index()
                    if key is not None:
                        break
                    self._wake.wait(timeout=wait)  # None: until a capture queues something
            try:
                done = self._index_step(key)
            except Exception as exc:  # noqa: BLE001 - the memory side failed or is not ready: retry later
                self._index_failed(key, exc)
                continue
            with self._wake:
                self._retry.pop(key, None)
                entry = self._metas.get(key)
                if done == NOTHING_INDEXES or entry is None or entry[1].indexed_lines >= entry[1].lines:
                    self._pending.pop(key, None)
                elif key in self._pending:
                    self._pending.move_to_end(key)  # the next step of a long session after the others' turn

    def _index_failed(self, key, exc: Exception) -> None:
        self.index_errors += 1
        with self._wake:
            failures = self._retry.get(key, (0.0, 0))[1]
            wait = RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)]
            self._retry[key] = (time.monotonic() + wait, failures + 1)
            if key in self._pending:
                self._pending.move_to_end(key)
            kind = type(exc).__name__
            first_of_kind = kind not in self._failure_kinds
            self._failure_kinds.add(kind)
        if first_of_kind:  # once per kind (a refused session retries every RETRY_SECONDS[-1]); the kind and the
            # session only: an exception's message may quote the turns, which are never logged
            log.warning("indexing session turns failed (%s) for agent %r, %s session %r; it is retried with a "
                        "backoff and the other sessions go on (further %s failures are not logged)", kind, key[0],
                        key[1], key[2], kind)

    def _index_step(self, key) -> bool | str:
        """Index the next lines of one session; True when it is all indexed, NOTHING_INDEXES when no plugin
        answers the hook (the turns stay unindexed in the archive until one does: the next start resumes)."""
        hook = self.host.hook.index_session_turns
        if not hook.get_hookimpls():
            return NOTHING_INDEXES
        with self._session_lock(key):
            base, meta = self._metas[key]
            start, end, first_turn = meta.indexed_lines, min(meta.lines, meta.indexed_lines + INDEX_LINES_PER_STEP), \
                meta.indexed_turns
            snapshot = archive.SessionMeta(**{f: getattr(meta, f) for f in meta.__struct_fields__})
        turns = []
        for line in archive.read_lines(base, snapshot, self.sealer, start, end):
            for turn in line_turns(meta.client, line, self.config.tool_output_chars):
                turns.append(turn | {"session_id": meta.session_id, "client": meta.client,
                                     "index": first_turn + len(turns), "cwd": meta.cwd, "project": meta.project})
        if turns:
            hook(host=self.host, agent=meta.agent, turns=turns)
        with self._session_lock(key):
            base, stored = self._metas[key]
            meta = msgspec.structs.replace(stored, indexed_lines=end, indexed_turns=first_turn + len(turns))
            archive.write_meta(base, meta, self.sealer)  # the mark moves in memory only once it is on disk
            self._metas[key] = (base, meta)
            return meta.indexed_lines >= meta.lines

    # -- reading --------------------------------------------------------------------------------------------
    def sessions_of(self, agent: str, project: str = "") -> list[SessionMeta]:
        """`agent`'s sessions (only in `project` when given), the latest first."""
        metas = [meta for (owner, _, _), (_, meta) in list(self._metas.items())
                 if owner == agent and (not project or meta.project == project)]
        return sorted(metas, key=lambda m: (m.last_time, m.session_id), reverse=True)

    def owns(self, agent: str, client, session_id) -> bool:
        """Whether `agent` captured this session (a check on what the memory side answers)."""
        return (agent, client, session_id) in self._metas

    def find(self, agent: str, session_id: str, client: str = "") -> tuple[Path, SessionMeta]:
        """One of `agent`'s sessions by id (another agent's is "no session", never a refusal that tells it
        exists)."""
        found = [self._metas[(agent, c, session_id)] for c in CLIENTS
                 if (agent, c, session_id) in self._metas and (not client or c == client)]
        if not found:
            recent = ", ".join(repr(m.session_id) for m in self.sessions_of(agent)[:3])
            raise UserError(f"you have no session {session_id[:70]!r}; session_list shows yours"
                            + (f" (the latest: {recent})." if recent else " (there are none yet)."))
        return max(found, key=lambda entry: entry[1].last_time)

    def turns(self, agent: str, session_id: str, offset: int, limit: int, client: str = "") -> tuple[SessionMeta,
                                                                                                         list[dict]]:
        """Turns `offset` to `offset + limit` of one of `agent`'s sessions, each with its "index"."""
        base, meta = self.find(agent, session_id, client)
        turns: list[dict] = []
        index = 0
        for line in archive.read_lines(base, meta, self.sealer):
            for turn in line_turns(meta.client, line, self.config.tool_output_chars):
                if index >= offset:
                    turns.append(turn | {"index": index})
                index += 1
                if len(turns) >= limit:
                    return meta, turns
        return meta, turns

    def search(self, agent: str, query: str, project: str, session_id: str, top_k: int) -> list[dict] | None:
        """`agent`'s own turns best matching `query` (the memory side searches), or None when nothing can."""
        return self.host.hook.search_session_turns(host=self.host, agent=agent, query=query, project=project,
                                                   session_id=session_id, top_k=top_k)

    # -- briefing and recall ---------------------------------------------------------------------------------
    def _delivered_to(self, agent: str, client: str, session_id: str) -> set[str]:
        key = (agent, client, session_id)
        with self._lock:
            ids = self._delivered.setdefault(key, set())
            self._delivered.move_to_end(key)
            while len(self._delivered) > DELIVERED_SESSIONS:
                self._delivered.popitem(last=False)
            return ids

    def project(self, cwd: str, repo: str = "") -> str:
        """The project of a session working in `cwd` (projects.py); `repo` is the repository root the client found
        above it on its own disk, if any. The server's disk is looked at only inside the [workspace] roots."""
        roots, private = self._workspace()
        return project_for(cwd, self.config.projects, roots=roots, repo=repo, private=private)

    def _workspace(self) -> tuple[list[str], list[str]]:
        """The [workspace] roots (resolved) and persmem's own files, which are never part of them."""
        if self._roots is None:
            try:
                roots = [str(root) for root in self.host.workspace_roots()]
            except UserError as exc:  # "/" as a root: no folder is looked at until it is fixed
                log.warning("sessions: projects are named from paths alone: %s", exc)
                roots = []
            self._roots = (roots, [str(path) for path in self.host.private_paths()])
        return self._roots

    def briefing(self, agent: str, client: str, session_id: str, cwd: str, repo: str = "") -> dict:
        """The text a session starts with: the `briefing_sections` answers (session_start_sections), most
        important first, within
        [sessions] briefing_tokens (4 characters a token), composed by briefing.py: each section a heading and its
        lines, made inert; a section too long for what is left keeps its first whole lines."""
        project = self.project(cwd, repo)
        budget = self.config.briefing_tokens * 4
        sections = session_start_sections(self.host, agent, project, cwd, budget)
        context, ids = briefing_text(agent, sections, budget)
        self._delivered_to(agent, client, session_id).update(ids)
        return {"context": context, "tokens": math.ceil(len(context) / 4), "project": project, "memory_ids": ids}

    def recall(self, agent: str, client: str, session_id: str, cwd: str, prompt: str, repo: str = "") -> dict:
        """The memories relevant to `prompt` this session has not received yet (none below the answering
        plugin's score floor), within [sessions] recall_chars: one JSON line each (briefing.recall_line)."""
        project = self.project(cwd, repo)
        delivered = self._delivered_to(agent, client, session_id)
        try:
            hits = self.host.hook.recall_for_prompt(host=self.host, agent=agent, project=project,
                                                    prompt=prompt[:PROMPT_CHARS], exclude_ids=sorted(delivered),
                                                    top_k=self.config.recall_top_k)
        except Exception as exc:  # noqa: BLE001 - recall is a help, never a failure of the prompt
            log.warning("recall_for_prompt failed (%s: %s)", type(exc).__name__, str(exc)[:200])
            hits = None
        context, ids = recall_text(agent, hits, delivered, self.config.recall_chars, self.config.recall_top_k)
        delivered.update(ids)
        return {"context": context, "memory_ids": ids}
