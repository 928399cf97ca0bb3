"""What the OAuth authorization server keeps, in `<home>/oauth.json` (written atomically under a lock, like
agents.json). Secrets never appear here: codes, tokens and client secrets only as SHA-256 hashes (they are
256-bit random), the operator's passphrase as a scrypt hash. New fields get defaults so older files decode."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

ACCESS_PREFIX = "pmat_"  # an OAuth access token (agent tokens start with "pm_")
REFRESH_PREFIX = "pmrt_"  # an OAuth refresh token
SPENT_REFRESH_KEPT = 20  # rotated-out refresh tokens remembered per grant, to catch a replay


class ClientRecord(msgspec.Struct, kw_only=True):
    """A client registered through RFC 7591 dynamic registration. Clients that name themselves with a client
    ID metadata document are not stored: their document is fetched when needed (client_documents.py)."""

    client_id: str
    client_name: str = ""
    redirect_uris: list[str] = []
    token_endpoint_auth_method: str = "none"
    secret_sha256: str | None = None  # confidential clients only
    metadata: dict[str, Any] = {}  # the registered metadata as RFC 7591 echoes it back (never the secret)
    registered: str = ""  # ISO 8601 UTC


class CodeRecord(msgspec.Struct, kw_only=True):
    """An authorization code the consent page issued: good once, for `code_seconds`."""

    code_sha256: str
    client_id: str
    client_name: str = ""
    redirect_uri: str
    redirect_uri_explicit: bool = True
    code_challenge: str
    resource: str
    scopes: list[str] = []
    agent: str
    agent_created: str  # the agent record's `created`: a name revoked and added again is another agent
    expires: float  # epoch seconds
    used: bool = False  # kept (until it would have expired) after use, so a replay is recognised
    grant_id: str | None = None  # the grant its exchange started, ended if the code is replayed


class AccessRecord(msgspec.Struct, kw_only=True):
    token_sha256: str
    expires: float


class GrantRecord(msgspec.Struct, kw_only=True):
    """One approval: a client acting as an agent, from consent until it is revoked or its refresh lapses."""

    grant_id: str  # "g_" + 16 hex
    client_id: str
    client_name: str = ""
    redirect_uri: str = ""
    agent: str
    agent_created: str
    resource: str
    scopes: list[str] = []
    created: str  # ISO 8601 UTC
    last_refreshed: str | None = None
    revoked: str | None = None
    revoked_reason: str = ""  # "operator", "agent revoked", "client revoked", "refresh token replayed", ...
    refresh_sha256: str | None = None  # the one live refresh token
    refresh_expires: float = 0.0
    spent_refresh: list[str] = []  # hashes of rotated-out refresh tokens (newest last, SPENT_REFRESH_KEPT)
    access: list[AccessRecord] = []  # live access tokens; expired ones are pruned on the next write


class ApprovalCode(msgspec.Struct, kw_only=True):
    """A one-time code `persmem oauth approve-code` printed, good for one consent."""

    code_sha256: str
    expires: float


class OperatorRecord(msgspec.Struct, kw_only=True):
    password_scrypt: str | None = None  # "scrypt$n$r$p$salt_hex$hash_hex"
    approval_codes: list[ApprovalCode] = []


class OAuthFile(msgspec.Struct, kw_only=True):
    schema: int = 1
    clients: dict[str, ClientRecord] = {}
    codes: dict[str, CodeRecord] = {}  # by code_sha256
    grants: dict[str, GrantRecord] = {}  # by grant_id
    operator: OperatorRecord = msgspec.field(default_factory=OperatorRecord)


class TokenSet(msgspec.Struct, kw_only=True):
    """What the token endpoint hands out (the secrets, once)."""

    access_token: str
    refresh_token: str
    expires_in: int
    scopes: list[str]
    grant_id: str


GrantState = Literal["active", "revoked", "expired"]
