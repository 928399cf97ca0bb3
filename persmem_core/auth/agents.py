"""Named agents and their credentials.

Each agent (kite, wren, ...) may hold a bearer token and/or a secret URL
path. The registry stores only SHA-256 hashes (the secrets are 256-bit random, so a
plain hash is enough); the secret itself is shown once, by `persmem agent
add`, and a token is also kept in a file only the user can read
(token_files.py) so that `persmem connect` prints lines that work as pasted. The registry is `agents.json` in the persmem home, written atomically
under a lock so the CLI can change it while the server runs; the server
re-reads it when the file changes, so a revoke takes effect at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import secrets
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from persmem_core.invocation import persmem_line
from persmem_core.errors import UserError
from persmem_core.fileio import atomic_write_bytes
from persmem_core.auth.token_files import forget_token, keep_token

NAME_RE = re.compile(r"[a-z][a-z0-9_-]{0,31}\Z")  # \Z: "$" would let a name end in a line break
TOKEN_PREFIX = "pm_"


class AgentRecord(msgspec.Struct, kw_only=True):
    created: str
    token_sha256: str | None = None
    path_sha256: str | None = None
    revoked: str | None = None
    tool_sets: list[str] | None = None  # the tool sets its connections list (tool_sets.py); None: [tools] default_sets


class Registry(msgspec.Struct, kw_only=True):
    schema: int = 1
    agents: dict[str, AgentRecord] = {}


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise UserError(
            f"invalid agent name {name!r}: use 1-32 lowercase letters, digits, '_' or '-', starting with a letter "
            "(for example: kite)."
        )
    return name


def secret_sha256(secret: str) -> str:
    """How every credential persmem issues is kept: SHA-256 hex (the secrets are 256-bit random, so a plain hash
    is enough; agents' tokens and secret paths here, OAuth codes, tokens and client secrets in oauth/store.py)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")  # tells a re-added agent from the old one


class Issued(msgspec.Struct, kw_only=True):
    """Secrets shown once, right after they are created."""

    name: str
    token: str | None = None
    secret_path: str | None = None


def _live(registry: Registry, name: str) -> AgentRecord:
    """`name`'s record when the agent exists and is not revoked; otherwise a UserError saying how to make it."""
    record = registry.agents.get(name)
    if record is None or record.revoked is not None:
        raise UserError(
            f"no active agent named {name!r}: `{persmem_line('agent', 'add', name)}` creates it; "
            f"`{persmem_line('agent', 'list')}` shows the agents."
        )
    return record


class AgentStore:
    """The agents.json registry: lookups for the server, changes for the CLI."""

    def __init__(self, home: Path):
        self.path = Path(home) / "agents.json"
        self._lock_path = Path(home) / ".agents.lock"
        self._cache: Registry = Registry()
        self._cache_key: tuple[int, int, int] | None = None
        self._by_token: dict[str, str] = {}
        self._by_path: dict[str, str] = {}
        self._mutex = threading.Lock()
        self.last_seen: dict[str, float] = {}

    # -- reading -------------------------------------------------------
    def _load(self) -> Registry:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            if self._cache_key is not None or self._cache.agents:
                self._set_cache(Registry(), None)
            return self._cache
        # every write is a new inode (atomic rename): a rotated token of the same length, written within one
        # clock tick of the last read, still counts as a change
        key = (st.st_ino, st.st_mtime_ns, st.st_size)
        if key != self._cache_key:
            try:
                registry = msgspec.json.decode(self.path.read_bytes(), type=Registry)
            except (msgspec.DecodeError, msgspec.ValidationError) as exc:
                raise UserError(
                    f"{self.path}: the agent registry is damaged ({exc}). Restore it from a backup "
                    f"or move it away and add the agents again with `{persmem_line('agent', 'add', 'NAME')}`."
                ) from None
            self._set_cache(registry, key)
        return self._cache

    def _set_cache(self, registry: Registry, key) -> None:
        self._cache = registry
        self._cache_key = key
        live = {n: r for n, r in registry.agents.items() if r.revoked is None}
        self._by_token = {r.token_sha256: n for n, r in live.items() if r.token_sha256}
        self._by_path = {r.path_sha256: n for n, r in live.items() if r.path_sha256}

    def agents(self) -> dict[str, AgentRecord]:
        with self._mutex:
            return dict(self._load().agents)

    def seen(self, name: str) -> None:
        """Note that `name` just made a request (kept in memory: `last_seen` is since this server started)."""
        self.last_seen[name] = time.time()

    def names(self) -> list[str]:
        """Agents that exist and are not revoked."""
        return sorted(n for n, r in self.agents().items() if r.revoked is None)

    def has_credentials(self) -> bool:
        with self._mutex:
            self._load()
            return bool(self._by_token or self._by_path)

    def agent_for_token(self, token: str) -> str | None:
        with self._mutex:
            self._load()
            return self._by_token.get(secret_sha256(token))

    def agent_for_path_secret(self, secret: str) -> str | None:
        with self._mutex:
            self._load()
            return self._by_path.get(secret_sha256(secret))

    # -- changing ------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self):
        self._lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with self._mutex:
                    self._cache_key = None  # re-read under the lock: another process may have written
                    yield self._load()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _put(self, registry: Registry, name: str, record: AgentRecord) -> None:
        """Save `registry` with `name`'s record replaced by `record` (the caller holds the lock)."""
        self._save(Registry(agents={**registry.agents, name: record}))

    def _save(self, registry: Registry) -> None:
        atomic_write_bytes(self.path, msgspec.json.format(msgspec.json.encode(registry), indent=2) + b"\n")
        self._cache_key = None

    def add(self, name: str, *, token: bool = True, secret_path: bool = False, replace: bool = False) -> Issued:
        """Create `name` (or give it new credentials with `replace`) and return the secrets, once."""
        check_name(name)
        if not (token or secret_path):
            raise UserError("an agent needs a token, a secret path, or both.")
        with self._locked() as registry:
            existing = registry.agents.get(name)
            if existing is not None and existing.revoked is None and not replace:
                raise UserError(
                    f"agent {name!r} already exists. `{persmem_line('agent', 'secret-path', name)}` gives it a "
                    f"secret path and `{persmem_line('agent', 'token', name)}` a new token (each keeps the other "
                    f"working); `{persmem_line('agent', 'add', name, '--rotate')}` replaces all its credentials; "
                    f"`{persmem_line('agent', 'revoke', name)}` revokes it."
                )
            issued = Issued(name=name)
            # a revoked name added again is a new agent: whatever trusted the old one (a dashboard login)
            # compares `created` and does not carry over
            live = existing is not None and existing.revoked is None
            record = AgentRecord(created=existing.created if live else _now(),
                                 tool_sets=existing.tool_sets if live else None)
            if token:
                issued.token = TOKEN_PREFIX + secrets.token_urlsafe(32)
                record.token_sha256 = secret_sha256(issued.token)
            if secret_path:
                issued.secret_path = secrets.token_urlsafe(32)
                record.path_sha256 = secret_sha256(issued.secret_path)
            self._put(registry, name, record)
            self._keep(issued)
        return issued

    def _keep(self, issued: Issued) -> None:
        """A token just issued also goes to the agent's private token file (token_files.py); an agent issued
        none has no file."""
        if issued.token:
            keep_token(self.path.parent, issued.name, issued.token)
        else:
            forget_token(self.path.parent, issued.name)

    def renew(self, name: str, *, token: bool = False, secret_path: bool = False) -> Issued:
        """Give the live agent `name` a new token and/or secret path and return them, once. The credential
        not named is kept: adding a secret path for claude.ai must not break the token Claude Code uses."""
        check_name(name)
        if not (token or secret_path):
            raise UserError("say which credential to issue: a token, a secret path, or both.")
        with self._locked() as registry:
            record = _live(registry, name)
            issued = Issued(name=name)
            changes = {}
            if token:
                issued.token = TOKEN_PREFIX + secrets.token_urlsafe(32)
                changes["token_sha256"] = secret_sha256(issued.token)
            if secret_path:
                issued.secret_path = secrets.token_urlsafe(32)
                changes["path_sha256"] = secret_sha256(issued.secret_path)
            self._put(registry, name, msgspec.structs.replace(record, **changes))
            if issued.token:
                keep_token(self.path.parent, name, issued.token)
        return issued

    def set_tool_sets(self, name: str, sets: list[str] | None) -> None:
        """Give the live agent `name` these tool sets (None: back to [tools] default_sets)."""
        check_name(name)
        with self._locked() as registry:
            record = _live(registry, name)
            self._put(registry, name, msgspec.structs.replace(record, tool_sets=None if sets is None else list(sets)))

    def revoke(self, name: str) -> None:
        """Remove `name`'s credentials; the name stays listed as revoked."""
        check_name(name)
        with self._locked() as registry:
            record = registry.agents.get(name)
            if record is None or record.revoked is not None:
                raise UserError(f"no active agent named {name!r}; `{persmem_line('agent', 'list')}` shows them.")
            self._put(registry, name, AgentRecord(created=record.created, revoked=_now()))
            forget_token(self.path.parent, name)
