"""`<home>/oauth.json`: registered clients, authorization codes, grants and the operator's credential.

Like agents.json (agents.py), the file is changed under a lock and written atomically, and re-read by the server
when it changes, so `persmem oauth revoke` or `persmem agent revoke` takes effect at once (registry_file.py). Every
change is ONE locked read-modify-write: of two concurrent exchanges of one code exactly one wins, the other is seen
as a replay.

Secrets are never stored: codes, tokens and approval codes as SHA-256 (they are random, ≥ 60 bits for the
short-lived, single-use approval code, 256 bits for the rest), the operator passphrase as scrypt
(operator_credential.py).

The resource server's check (`agent_for_access_token`, on every MCP request and twice a second while a response
streams) reads an in-memory index, rebuilt only when the file changed, and never writes.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from persmem_core.auth.agents import secret_sha256
from persmem_core.auth.oauth.operator_credential import OperatorCredential
from persmem_core.auth.oauth.records import (
    ACCESS_PREFIX,
    REFRESH_PREFIX,
    SPENT_REFRESH_KEPT,
    AccessRecord,
    ClientRecord,
    CodeRecord,
    GrantRecord,
    GrantState,
    TokenSet,
)
from persmem_core.auth.oauth.registry_file import DAY, RegistryFile
from persmem_core.errors import UserError
from persmem_core.invocation import persmem_line

if TYPE_CHECKING:
    from persmem_core.auth.agents import AgentStore
    from persmem_core.settings import OAuthConfig


class GrantError(Exception):
    """An RFC 6749 error the token and revocation endpoints return as is (`error`, `error_description`)."""

    def __init__(self, error: str, description: str):
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description


def _now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def grant_state(grant: GrantRecord, now: float | None = None) -> GrantState:
    """active, revoked (see `revoked_reason`) or expired (its refresh token lapsed unused)."""
    if grant.revoked is not None:
        return "revoked"
    if grant.refresh_expires <= (time.time() if now is None else now):
        return "expired"
    return "active"


class OAuthStore(RegistryFile, OperatorCredential):
    """oauth.json: the authorization server's writes (registration, consent, token endpoint, revocation, the
    CLI) and the resource server's token lookups."""

    def __init__(self, home: Path, agents: AgentStore, config_of: Callable[[], OAuthConfig]):
        super().__init__(home)
        self.agents = agents
        self._config_of = config_of  # called only when lifetimes are needed: the config may not validate yet

    def _agent_is(self, name: str, created: str) -> bool:
        """`name` exists unrevoked and is the same agent that was approved (not one revoked and added again)."""
        record = self.agents.agents().get(name)
        return record is not None and record.revoked is None and record.created == created

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
