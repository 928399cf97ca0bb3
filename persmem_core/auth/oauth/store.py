"""`<home>/oauth.json`: registered clients, authorization codes, grants and the operator's credential.

Like agents.json (agents.py), the file is changed under a lock (flock on `.oauth.lock`, so the CLI and a running
server never interleave, plus a threading lock for the server's threads), written atomically (a write that
returned survives kill -9), and re-read by the server when its (mtime, size) changes, so `persmem oauth revoke`
or `persmem agent revoke` takes effect at once. Every change is ONE locked read-modify-write: of two concurrent
exchanges of one code exactly one wins, the other is seen as a replay.

Secrets are never stored: codes, tokens and approval codes as SHA-256 (they are random, ≥ 60 bits for the
short-lived, single-use approval code, 256 bits for the rest), the operator passphrase as scrypt.

The resource server's check (`agent_for_access_token`, on every MCP request and twice a second while a response
streams) reads an in-memory index, rebuilt only when the file changed, and never writes.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import hmac
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from persmem_core.auth.agents import secret_sha256
from persmem_core.invocation import persmem_line
from persmem_core.errors import UserError
from persmem_core.fileio import atomic_write_bytes
from persmem_core.auth.oauth.records import (
    ACCESS_PREFIX,
    REFRESH_PREFIX,
    SPENT_REFRESH_KEPT,
    AccessRecord,
    ApprovalCode,
    ClientRecord,
    CodeRecord,
    GrantRecord,
    GrantState,
    OAuthFile,
    TokenSet,
)

if TYPE_CHECKING:
    from persmem_core.auth.agents import AgentStore
    from persmem_core.settings import OAuthConfig

DAY = 86400.0
ENDED_GRANTS_KEPT_DAYS = 30  # a grant whose refresh lapsed this long ago is dropped (listed as expired until then)
UNUSED_CLIENT_DAYS = 1  # a registered client that never got a grant is dropped after this (registration is open)
MIN_PASSWORD_CHARS = 12
MAX_SECRET_CHARS = 1024  # longer operator secrets are refused before scrypt sees them
SCRYPT_N, SCRYPT_R, SCRYPT_P = 2**14, 8, 1
APPROVAL_CODE_CHARS = 12  # base32: 60 bits, single use, for minutes; typed by a person, so grouped by 4


class GrantError(Exception):
    """An RFC 6749 error the token and revocation endpoints return as is (`error`, `error_description`)."""

    def __init__(self, error: str, description: str):
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _iso_epoch(value: str) -> float:
    try:
        return datetime.fromisoformat(value).timestamp()
    except (TypeError, ValueError):
        return 0.0


def _scrypt(password: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return hashlib.scrypt(password.encode("utf-8"), salt=salt, n=n, r=r, p=p, maxmem=64 * 1024 * 1024, dklen=32)


def check_time_spent(secret: str) -> None:
    """The work of one passphrase check, done for nothing: a consent refused for another reason (an agent
    that does not exist) takes as long as a wrong passphrase, so its timing does not tell them apart."""
    _scrypt(secret[:MAX_SECRET_CHARS], b"\0" * 16, SCRYPT_N, SCRYPT_R, SCRYPT_P)


def _normal_approval_code(secret: str) -> str | None:
    """The approval code as generated (upper case, no separators), or None if `secret` cannot be one."""
    code = "".join(secret.split()).replace("-", "").upper()
    if len(code) != APPROVAL_CODE_CHARS or any(c not in "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567" for c in code):
        return None
    return code


def grant_state(grant: GrantRecord, now: float | None = None) -> GrantState:
    """active, revoked (see `revoked_reason`) or expired (its refresh token lapsed unused)."""
    if grant.revoked is not None:
        return "revoked"
    if grant.refresh_expires <= (time.time() if now is None else now):
        return "expired"
    return "active"


class OAuthStore:
    """oauth.json: the authorization server's writes (registration, consent, token endpoint, revocation, the
    CLI) and the resource server's token lookups."""

    def __init__(self, home: Path, agents: AgentStore, config_of: Callable[[], OAuthConfig]):
        self.path = Path(home) / "oauth.json"
        self._lock_path = Path(home) / ".oauth.lock"
        self.agents = agents
        self._config_of = config_of  # called only when lifetimes are needed: the config may not validate yet
        self._mutex = threading.Lock()
        self._cache = OAuthFile()
        self._cache_key: tuple[int, int, int] | None = None
        self._by_access: dict[str, tuple[str, float]] = {}  # sha256 -> (grant_id, expires), live grants only
        self._by_refresh: dict[str, tuple[str, bool]] = {}  # sha256 -> (grant_id, spent?), every grant

    # -- reading -------------------------------------------------------
    def _decode(self, data: bytes) -> OAuthFile:
        try:
            return msgspec.json.decode(data, type=OAuthFile)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise UserError(
                f"{self.path}: the OAuth registry is damaged ({exc}). Restore it from a backup, or move it away: "
                "remote clients then sign in again (each asks the operator for consent once more) and "
                f"`{persmem_line('oauth', 'password')}` sets the operator passphrase again."
            ) from None

    def _stat_key(self) -> tuple[int, int, int] | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        # every write is a new inode (atomic rename): two same-size writes within one clock tick still differ
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    def _load(self) -> OAuthFile:
        """The cached file, re-read if it changed on disk. Call with the mutex held."""
        key = self._stat_key()
        if key is None:
            if self._cache_key is not None or self._cache.grants or self._cache.clients:
                self._set_cache(OAuthFile(), None)
            return self._cache
        if key != self._cache_key:
            self._set_cache(self._decode(self.path.read_bytes()), key)
        return self._cache

    def _set_cache(self, data: OAuthFile, key: tuple[int, int, int] | None) -> None:
        self._cache, self._cache_key = data, key
        by_access: dict[str, tuple[str, float]] = {}
        by_refresh: dict[str, tuple[str, bool]] = {}
        for grant in data.grants.values():
            for spent in grant.spent_refresh:
                by_refresh[spent] = (grant.grant_id, True)
            if grant.refresh_sha256:
                by_refresh[grant.refresh_sha256] = (grant.grant_id, False)
            if grant.revoked is None:
                for access in grant.access:
                    by_access[access.token_sha256] = (grant.grant_id, access.expires)
        self._by_access, self._by_refresh = by_access, by_refresh

    def _snapshot(self) -> OAuthFile:
        with self._mutex:
            return self._load()

    def _agent_is(self, name: str, created: str) -> bool:
        """`name` exists unrevoked and is the same agent that was approved (not one revoked and added again)."""
        record = self.agents.agents().get(name)
        return record is not None and record.revoked is None and record.created == created

    # -- changing ------------------------------------------------------
    @contextlib.contextmanager
    def _locked(self) -> Iterator[OAuthFile]:
        """A fresh copy of the file (another process may have written it) for one read-modify-write; the caller
        saves it with `_save` before leaving, or changes nothing."""
        self._lock_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                with self._mutex:
                    # decoded anew, never the cached object: readers may hold records from it
                    yield self._decode(self.path.read_bytes()) if self.path.exists() else OAuthFile()
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _save(self, data: OAuthFile) -> None:
        """Prune, write atomically, and make the written content the cache. Call inside `_locked`."""
        self._prune(data, time.time())
        atomic_write_bytes(self.path, msgspec.json.format(msgspec.json.encode(data), indent=2) + b"\n")
        self._set_cache(data, self._stat_key())

    @staticmethod
    def _prune(data: OAuthFile, now: float) -> None:
        """Drop what can never be used again. Used codes stay until they would have expired, so a replay is
        recognised; ended grants stay listed for a while, so `persmem oauth clients` shows what happened."""
        data.codes = {h: c for h, c in data.codes.items() if c.expires > now}
        kept_grants = {}
        for grant_id, grant in data.grants.items():
            if grant.refresh_expires + ENDED_GRANTS_KEPT_DAYS * DAY < now:
                continue
            grant.access = [a for a in grant.access if a.expires > now]
            kept_grants[grant_id] = grant
        data.grants = kept_grants
        granted = {grant.client_id for grant in data.grants.values()}
        data.clients = {
            cid: c for cid, c in data.clients.items()
            if cid in granted or _iso_epoch(c.registered) + UNUSED_CLIENT_DAYS * DAY > now
        }
        data.operator.approval_codes = [a for a in data.operator.approval_codes if a.expires > now]

    @staticmethod
    def _end(grant: GrantRecord, reason: str) -> None:
        grant.revoked = _now_iso()
        grant.revoked_reason = reason
        grant.access = []

    def _config(self) -> OAuthConfig:
        return self._config_of()

    def _new_tokens(self, grant: GrantRecord, now: float) -> TokenSet:
        """A fresh access + refresh token for `grant` (the refresh token it had, if any, becomes spent)."""
        config = self._config()
        access = ACCESS_PREFIX + secrets.token_urlsafe(32)
        refresh = REFRESH_PREFIX + secrets.token_urlsafe(32)
        if grant.refresh_sha256:
            grant.spent_refresh = [*grant.spent_refresh, grant.refresh_sha256][-SPENT_REFRESH_KEPT:]
        grant.refresh_sha256 = secret_sha256(refresh)
        grant.refresh_expires = now + config.refresh_token_days * DAY
        grant.access = [*grant.access, AccessRecord(token_sha256=secret_sha256(access),
                                                    expires=now + config.access_token_seconds)]
        return TokenSet(access_token=access, refresh_token=refresh, expires_in=config.access_token_seconds,
                        scopes=list(grant.scopes), grant_id=grant.grant_id)

    # -- clients (RFC 7591) ----------------------------------------------
    def register_client(self, record: ClientRecord) -> None:
        """Keep a dynamically registered client. Registration is open to anyone, so the number is capped: at the
        cap the oldest client that never got a grant makes room (a flood pushes out its own registrations), and
        only when every client has a grant is a new one refused."""
        with self._locked() as data:
            self._prune(data, time.time())
            limit = self._config().max_clients
            if record.client_id not in data.clients and len(data.clients) >= limit:
                granted = {grant.client_id for grant in data.grants.values()}
                idle = sorted((c for c in data.clients.values() if c.client_id not in granted),
                              key=lambda c: c.registered)
                if not idle:
                    raise GrantError(
                        "invalid_client_metadata",
                        f"this server already holds {limit} registered clients with grants, its limit; ask the "
                        "operator to end unused ones (`persmem oauth clients`, `persmem oauth revoke`) or raise "
                        "[oauth] max_clients.",
                    )
                del data.clients[idle[0].client_id]
            if not record.registered:
                record = msgspec.structs.replace(record, registered=_now_iso())
            data.clients[record.client_id] = record
            self._save(data)

    def client(self, client_id: str) -> ClientRecord | None:
        if not isinstance(client_id, str):
            return None
        return self._snapshot().clients.get(client_id)

    def clients(self) -> list[ClientRecord]:
        return sorted(self._snapshot().clients.values(), key=lambda c: c.registered, reverse=True)

    # -- consent -> code --------------------------------------------------
    def issue_code(self, *, client_id: str, client_name: str, redirect_uri: str, redirect_uri_explicit: bool,
                   code_challenge: str, resource: str, scopes: list[str], agent: str) -> str:
        """The authorization code for an approved consent (plaintext, returned once; stored hashed)."""
        record = self.agents.agents().get(agent) if isinstance(agent, str) else None
        if record is None or record.revoked is not None:
            raise UserError(f"no active agent named {agent!r}: pick one of the listed agents, or create it with "
                            f"`{persmem_line('agent', 'add', 'NAME')}`.")
        code = secrets.token_urlsafe(32)
        with self._locked() as data:
            data.codes[secret_sha256(code)] = CodeRecord(
                code_sha256=secret_sha256(code), client_id=client_id, client_name=client_name, redirect_uri=redirect_uri,
                redirect_uri_explicit=redirect_uri_explicit, code_challenge=code_challenge, resource=resource,
                scopes=list(scopes), agent=agent, agent_created=record.created,
                expires=time.time() + self._config().code_seconds,
            )
            self._save(data)
        return code

    def code(self, code: str) -> CodeRecord | None:
        """The record of `code`, used or not (so the token endpoint can recognise a replay); None if unknown or
        expired."""
        if not isinstance(code, str):
            return None
        record = self._snapshot().codes.get(secret_sha256(code))
        return record if record is not None and record.expires > time.time() else None

    def exchange_code(self, code: str, client_id: str) -> TokenSet:
        """Spend `code` (once) and start its grant: the first access and refresh token."""
        if not isinstance(code, str):
            raise GrantError("invalid_grant", "the authorization code is missing: start the authorization again.")
        with self._locked() as data:
            now = time.time()
            record = data.codes.get(secret_sha256(code))
            if record is None or record.expires <= now:
                raise GrantError("invalid_grant", "the authorization code is unknown or expired (codes work once, "
                                 f"for {self._config().code_seconds} s): start the authorization again.")
            if record.client_id != client_id:
                raise GrantError("invalid_grant", "the authorization code was issued to another client: start the "
                                 "authorization again with this client.")
            if record.used:
                # someone holds a copy of the code: whatever it gave out is no longer trusted
                grant = data.grants.get(record.grant_id or "")
                if grant is not None and grant.revoked is None:
                    self._end(grant, "authorization code replayed")
                    self._save(data)
                raise GrantError("invalid_grant", "the authorization code was already used; the grant it started is "
                                 "ended, since a copy of the code exists. Start the authorization again.")
            record.used = True
            if not self._agent_is(record.agent, record.agent_created):
                self._save(data)
                raise GrantError("invalid_grant", f"the agent {record.agent!r} this client was approved as no "
                                 "longer exists: start the authorization again and pick a live agent.")
            grant = GrantRecord(
                grant_id="g_" + secrets.token_hex(8), client_id=record.client_id, client_name=record.client_name,
                redirect_uri=record.redirect_uri, agent=record.agent, agent_created=record.agent_created,
                resource=record.resource, scopes=list(record.scopes), created=_now_iso(),
            )
            record.grant_id = grant.grant_id
            tokens = self._new_tokens(grant, now)
            data.grants[grant.grant_id] = grant
            self._save(data)
        return tokens

    # -- refresh ------------------------------------------------------------
    def refresh_grant(self, refresh_token: str) -> tuple[GrantRecord, bool] | None:
        """(the grant, whether this refresh token was already rotated out) or None if no grant knows it."""
        if not isinstance(refresh_token, str):
            return None
        with self._mutex:
            data = self._load()
            found = self._by_refresh.get(secret_sha256(refresh_token))
            if found is None or found[0] not in data.grants:
                return None
            return data.grants[found[0]], found[1]

    def refresh(self, refresh_token: str, client_id: str) -> TokenSet:
        """Rotate: a new access and refresh token; the presented one is spent. Presenting a spent one ends the
        grant (two parties hold it: one of them is not the client)."""
        if not isinstance(refresh_token, str):
            raise GrantError("invalid_grant", "the refresh token is missing: sign in again.")
        hashed = secret_sha256(refresh_token)
        with self._locked() as data:
            now = time.time()
            grant = next((g for g in data.grants.values()
                          if g.refresh_sha256 == hashed or hashed in g.spent_refresh), None)
            if grant is None:
                raise GrantError("invalid_grant", "the refresh token is unknown (or its grant ended long ago): "
                                 "sign in again.")
            if grant.client_id != client_id:
                raise GrantError("invalid_grant", "the refresh token was issued to another client: sign in again "
                                 "with this client.")
            if grant.revoked is not None:
                raise GrantError("invalid_grant", f"this grant was ended ({grant.revoked_reason or 'revoked'}): "
                                 "sign in again; the operator approves the connection once more.")
            if grant.refresh_sha256 != hashed:
                self._end(grant, "refresh token replayed")
                self._save(data)
                raise GrantError("invalid_grant", "the refresh token was already used (replayed): its grant is "
                                 "ended, since a copy exists. Sign in again; the operator approves once more.")
            if grant.refresh_expires <= now:
                raise GrantError("invalid_grant", "the refresh token lapsed (unused for longer than [oauth] "
                                 "refresh_token_days): sign in again.")
            if not self._agent_is(grant.agent, grant.agent_created):
                self._end(grant, "agent revoked")
                self._save(data)
                raise GrantError("invalid_grant", f"the agent {grant.agent!r} this client acts as was revoked: "
                                 "sign in again and pick a live agent.")
            tokens = self._new_tokens(grant, now)
            grant.last_refreshed = _now_iso()
            self._save(data)
        return tokens

    # -- resource server (hot path: no write, no file read unless it changed) --
    def _live_grant(self, token: str) -> GrantRecord | None:
        if not isinstance(token, str) or not token.startswith(ACCESS_PREFIX):
            return None
        with self._mutex:
            data = self._load()
            found = self._by_access.get(secret_sha256(token))
            if found is None or found[1] <= time.time():
                return None
            grant = data.grants.get(found[0])
        if grant is None or grant.revoked is not None or not self._agent_is(grant.agent, grant.agent_created):
            return None
        return grant

    def agent_for_access_token(self, token: str, resource: str) -> str | None:
        """The agent a live access token acts as, if it was issued for `resource` (this server's /mcp URL)."""
        grant = self._live_grant(token)
        return grant.agent if grant is not None and grant.resource == resource else None

    def access_grant(self, token: str) -> GrantRecord | None:
        """The grant of a live access token (not expired, grant not ended, its agent the one approved)."""
        return self._live_grant(token)

    # -- ending grants ----------------------------------------------------
    def revoke_token(self, token: str, client_id: str) -> bool:
        """RFC 7009: an access or refresh token of `client_id` ends its whole grant. False for a token this
        client does not hold (unknown, or another client's: not an error, RFC 7009 answers 200 either way)."""
        if not isinstance(token, str):
            return False
        hashed = secret_sha256(token)
        with self._locked() as data:
            for grant in data.grants.values():
                if grant.refresh_sha256 == hashed or hashed in grant.spent_refresh \
                        or any(a.token_sha256 == hashed for a in grant.access):
                    if grant.client_id != client_id:
                        return False
                    if grant.revoked is None:
                        self._end(grant, "client revoked")
                        self._save(data)
                    return True
        return False

    def revoke(self, target: str, reason: str = "operator") -> list[GrantRecord]:
        """End every live grant `target` names: a grant id ("g_...") or a client id (all of its grants)."""
        with self._locked() as data:
            now = time.time()
            named = [g for g in data.grants.values() if target in (g.grant_id, g.client_id)]
            live = [g for g in named if grant_state(g, now) == "active"]
            if not live:
                listing = persmem_line("oauth", "clients")
                if named:
                    raise UserError(f"{target!r} has no live grant (all of them ended already: revoked, or expired "
                                    f"unused); `{listing}` lists clients and grants.")
                raise UserError(f"no OAuth grant or client {target!r}: give a grant id (g_...) or a client id as "
                                f"`{listing}` lists them.")
            for grant in live:
                self._end(grant, reason)
            self._save(data)
        return live

    def revoke_agent(self, agent: str) -> list[GrantRecord]:
        """End every live grant acting as `agent` (it was revoked); [] if there is none."""
        with self._locked() as data:
            now = time.time()
            live = [g for g in data.grants.values() if g.agent == agent and grant_state(g, now) == "active"]
            for grant in live:
                self._end(grant, "agent revoked")
            if live:
                self._save(data)
        return live

    def grants(self) -> list[GrantRecord]:
        """Every grant still on file, newest first."""
        return sorted(self._snapshot().grants.values(), key=lambda g: g.created, reverse=True)

    # -- the operator -------------------------------------------------------
    def set_operator_password(self, password: str) -> None:
        """Set the passphrase the operator types on the consent page (stored as scrypt)."""
        if not isinstance(password, str) or len(password) < MIN_PASSWORD_CHARS:
            raise UserError(f"the operator passphrase must be at least {MIN_PASSWORD_CHARS} characters; choose a "
                            f"longer one, or let `{persmem_line('oauth', 'password', '--generate')}` make one.")
        if len(password) > MAX_SECRET_CHARS:
            raise UserError(f"the operator passphrase is longer than {MAX_SECRET_CHARS} characters; choose a "
                            "shorter one.")
        salt = secrets.token_bytes(16)
        digest = _scrypt(password, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P)
        encoded = f"scrypt${SCRYPT_N}${SCRYPT_R}${SCRYPT_P}${salt.hex()}${digest.hex()}"
        with self._locked() as data:
            data.operator.password_scrypt = encoded
            self._save(data)

    def new_approval_code(self, minutes: int = 10) -> str:
        """A one-time code ("XXXX-XXXX-XXXX") that approves one consent within `minutes`."""
        if not isinstance(minutes, int) or not 1 <= minutes <= 1440:
            raise UserError("an approval code works for 1 to 1440 minutes; give --minutes in that range.")
        code = base64.b32encode(secrets.token_bytes(8)).decode("ascii")[:APPROVAL_CODE_CHARS]
        with self._locked() as data:
            data.operator.approval_codes = [*data.operator.approval_codes,
                                            ApprovalCode(code_sha256=secret_sha256(code), expires=time.time() + minutes * 60)]
            self._save(data)
        return "-".join(code[i:i + 4] for i in range(0, APPROVAL_CODE_CHARS, 4))

    def has_operator_credential(self) -> bool:
        """A passphrase is set, or an approval code is waiting to be used."""
        operator = self._snapshot().operator
        now = time.time()
        return operator.password_scrypt is not None or any(a.expires > now for a in operator.approval_codes)

    def check_operator(self, secret: str) -> bool:
        """True if `secret` is the operator passphrase or a live approval code (which is then used up)."""
        if not isinstance(secret, str) or not secret or len(secret) > MAX_SECRET_CHARS:
            return False
        code = _normal_approval_code(secret)
        if code is not None and self._use_approval_code(code):
            return True
        encoded = self._snapshot().operator.password_scrypt
        if not encoded:
            return False
        try:
            _, n, r, p, salt, expected = encoded.split("$")
            digest = _scrypt(secret, bytes.fromhex(salt), int(n), int(r), int(p))
        except ValueError:
            raise UserError(f"{self.path}: the operator passphrase record is damaged; set it again with "
                            f"`{persmem_line('oauth', 'password')}`.") from None
        return hmac.compare_digest(digest.hex(), expected)

    def _use_approval_code(self, code: str) -> bool:
        hashed = secret_sha256(code)
        now = time.time()
        if not any(hmac.compare_digest(a.code_sha256, hashed) for a in self._snapshot().operator.approval_codes):
            return False  # no write for what is surely not a code
        with self._locked() as data:
            codes = data.operator.approval_codes
            match = next((a for a in codes if hmac.compare_digest(a.code_sha256, hashed) and a.expires > now), None)
            if match is None:
                return False
            data.operator.approval_codes = [a for a in codes if a is not match]
            self._save(data)
        return True
