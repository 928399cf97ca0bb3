"""The MCP SDK's authorization-server provider interface over persmem's OAuth store, plus the pending consents.

The SDK's handlers (`mcp.server.auth.handlers`) parse and check the requests (client, redirect URI, PKCE,
code expiry, redirect URI at the token endpoint); this class answers what they ask: who is this client, keep
this registration, start an authorization, load and spend codes and refresh tokens, revoke. The store does
the bookkeeping (hashes, single use, rotation, replay), and its GrantErrors become the token endpoint's
RFC 6749 errors here.

`authorize` does not issue anything: it keeps the request as a PendingConsent (in memory, minutes) and sends
the browser to the consent page, where the operator approves the client as one agent (consent.py), which
calls `finish_consent` for the redirect back to the client.
"""

from __future__ import annotations

import collections
import contextvars
import json
import re
import secrets
import time
from dataclasses import dataclass, field

import anyio.to_thread
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    AuthorizeError,
    RefreshToken,
    RegistrationError,
    TokenError,
    construct_redirect_uri,
)
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from persmem_core.auth.agents import secret_sha256
from persmem_core.errors import UserError
from persmem_core.auth.oauth.client_documents import ClientDocumentError, ClientDocuments, redirect_uri_problem
from persmem_core.auth.oauth.records import ClientRecord, TokenSet
from persmem_core.auth.oauth.store import GrantError
from persmem_core.text import control_characters

CONSENT_PATH = "/oauth/consent"
MAX_PENDING = 500  # consents waiting at once; /authorize is open, so beyond this the biggest sender's oldest goes
MAX_PENDING_PER_CLIENT = 10  # a client opening more consents than this loses its own oldest
MAX_PENDING_PER_ADDRESS = 50  # so does an address
# The caller's address, set by the /authorize route for `authorize` (the SDK's handler does not pass the request).
caller_address: contextvars.ContextVar[str] = contextvars.ContextVar("persmem_oauth_caller", default="")
MAX_CLIENT_METADATA_BYTES = 8 * 1024  # registration is open: what one client may make oauth.json keep
MAX_REDIRECT_URIS = 20
PKCE_CHALLENGE = re.compile(r"^[A-Za-z0-9_-]{43}$")  # base64url(SHA-256) without padding
TOKEN_ERRORS = {"invalid_request", "invalid_client", "invalid_grant", "unauthorized_client",
                "unsupported_grant_type", "invalid_scope", "invalid_target"}


@dataclass
class PendingConsent:
    """An authorization request waiting for the operator's decision on the consent page."""

    request_id: str  # secrets.token_urlsafe(32): the consent page's only handle on the request
    client_id: str
    client_name: str  # from registration / metadata document ("" -> the page shows the client_id)
    client_uri: str | None  # the client's home page if it gave one (shown, not trusted)
    redirect_uri: str  # the validated redirect URI the code will go to
    redirect_uri_explicit: bool
    state: str | None
    code_challenge: str
    resource: str  # always this server's resource (checked in authorize; defaulted if absent)
    scopes: list[str] = field(default_factory=list)
    expires: float = 0.0
    failures: int = 0  # wrong operator credentials on this request; after 5 it is dropped (consent.py)
    address: str = ""  # who opened it: a flood of /authorize requests evicts its sender's own, not the operator's


def token_error(exc: GrantError) -> TokenError:
    """The store's error as the SDK's token endpoint error (anything unexpected is invalid_grant: nothing issued)."""
    return TokenError(error=exc.error if exc.error in TOKEN_ERRORS else "invalid_grant",  # type: ignore[arg-type]
                      error_description=exc.description)


def oauth_token(tokens: TokenSet) -> OAuthToken:
    return OAuthToken(access_token=tokens.access_token, expires_in=tokens.expires_in,
                      scope=" ".join(tokens.scopes) or None, refresh_token=tokens.refresh_token)


class PersmemOAuthProvider:
    """mcp.server.auth.provider.OAuthAuthorizationServerProvider over `host.oauth`."""

    def __init__(self, host, *, issuer: str, resource: str):
        self.host = host
        self.issuer = issuer
        self.resource = resource
        self.pending: dict[str, PendingConsent] = {}
        self.documents = ClientDocuments(lambda: self._config().client_document_private_hosts)

    def _config(self):
        return self.host.section("oauth")

    # -- clients ----------------------------------------------------------------------------------------------

    async def client_document(self, client_id: str) -> OAuthClientInformationFull:
        """The client a client ID metadata document describes; ClientDocumentError says why not."""
        if not self._config().client_documents:
            raise ClientDocumentError("this server does not accept client ID metadata documents ([oauth] "
                                      "client_documents is off): register the client (RFC 7591) instead")
        return await self.documents.fetch(client_id)

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        if client_id.startswith("https://"):
            try:
                return await self.client_document(client_id)
            except ClientDocumentError:
                return None  # routes.py answers /authorize with the reason before the SDK gets here
        record = await anyio.to_thread.run_sync(self.host.oauth.client, client_id)
        if record is None:
            return None
        # client_secret carries the secret's SHA-256: routes.HashedSecretAuthenticator compares hashes
        return OAuthClientInformationFull.model_validate({
            **record.metadata,
            "client_id": record.client_id,
            "client_name": record.client_name or None,
            "redirect_uris": record.redirect_uris,
            "token_endpoint_auth_method": record.token_endpoint_auth_method,
            "client_secret": record.secret_sha256,
        })

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        uris = [str(uri) for uri in client_info.redirect_uris or []]
        if len(uris) > MAX_REDIRECT_URIS:
            raise RegistrationError("invalid_redirect_uri", f"at most {MAX_REDIRECT_URIS} redirect URIs per client")
        for uri in uris:
            problem = redirect_uri_problem(uri)
            if problem:
                raise RegistrationError("invalid_redirect_uri", problem)
        for field_name in ("client_name", "client_uri"):
            if control_characters(str(getattr(client_info, field_name) or "")):
                raise RegistrationError("invalid_client_metadata", f"{field_name} contains control characters "
                                        "(escape sequences, line breaks, direction overrides); use plain text")
        if client_info.token_endpoint_auth_method not in ("none", "client_secret_post", "client_secret_basic"):
            raise RegistrationError("invalid_client_metadata", "token_endpoint_auth_method must be none, "
                                    "client_secret_post or client_secret_basic")
        metadata = client_info.model_dump(mode="json", exclude_none=True,
                                          exclude={"client_secret", "client_id", "client_id_issued_at"})
        if len(json.dumps(metadata)) > MAX_CLIENT_METADATA_BYTES:
            raise RegistrationError("invalid_client_metadata", f"the client metadata is larger than "
                                    f"{MAX_CLIENT_METADATA_BYTES // 1024} KB; register with less (no inline jwks, "
                                    "shorter names and lists)")
        record = ClientRecord(
            client_id=client_info.client_id,
            client_name=(client_info.client_name or "")[:200],
            redirect_uris=uris,
            token_endpoint_auth_method=client_info.token_endpoint_auth_method or "none",
            secret_sha256=secret_sha256(client_info.client_secret) if client_info.client_secret else None,
            metadata=metadata,
        )
        try:
            await anyio.to_thread.run_sync(self.host.oauth.register_client, record)
        except GrantError as exc:
            raise RegistrationError("invalid_client_metadata", exc.description) from None

    # -- authorization: a pending consent, then the code ------------------------------------------------------

    async def authorize(self, client: OAuthClientInformationFull, params: AuthorizationParams) -> str:
        if params.resource is not None and params.resource != self.resource:
            raise AuthorizeError("invalid_target", f"this server issues tokens only for the resource "
                                 f"{self.resource}; the request named {params.resource[:200]!r}")
        if not PKCE_CHALLENGE.match(params.code_challenge):
            raise AuthorizeError("invalid_request", "code_challenge must be the base64url SHA-256 of the code "
                                 "verifier (43 characters, code_challenge_method S256)")
        self._drop_expired()
        address = caller_address.get()
        self._make_room(client.client_id, address)
        request_id = secrets.token_urlsafe(32)
        self.pending[request_id] = PendingConsent(
            request_id=request_id,
            client_id=client.client_id,
            client_name=(client.client_name or "")[:200],
            client_uri=str(client.client_uri) if client.client_uri else None,
            redirect_uri=str(params.redirect_uri),
            redirect_uri_explicit=params.redirect_uri_provided_explicitly,
            state=params.state,
            code_challenge=params.code_challenge,
            resource=self.resource,
            scopes=list(params.scopes or []),
            expires=time.time() + self._config().consent_minutes * 60,
            address=address,
        )
        return f"{self.issuer}{CONSENT_PATH}?request={request_id}"

    def _make_room(self, client_id: str, address: str) -> None:
        """Room for one more pending consent, taken from whoever opens the most: the client's own oldest beyond
        MAX_PENDING_PER_CLIENT, the address's own beyond MAX_PENDING_PER_ADDRESS, and when all are full the oldest
        of the address with the most. A flood evicts the flooder's requests, never the operator's one."""
        def drop_oldest(match) -> None:
            self.pending.pop(next(r for r, p in self.pending.items() if match(p)))

        if sum(p.client_id == client_id for p in self.pending.values()) >= MAX_PENDING_PER_CLIENT:
            drop_oldest(lambda p: p.client_id == client_id)
        if sum(p.address == address for p in self.pending.values()) >= MAX_PENDING_PER_ADDRESS:
            drop_oldest(lambda p: p.address == address)
        while len(self.pending) >= MAX_PENDING:
            biggest = collections.Counter(p.address for p in self.pending.values()).most_common(1)[0][0]
            drop_oldest(lambda p: p.address == biggest)

    def _drop_expired(self) -> None:
        now = time.time()
        for request_id in [r for r, p in self.pending.items() if p.expires <= now]:
            del self.pending[request_id]

    def pending_consent(self, request_id: str) -> PendingConsent | None:
        """The request the consent page shows, or None if it is unknown, expired or answered."""
        if not isinstance(request_id, str):
            return None
        self._drop_expired()
        return self.pending.get(request_id)

    def finish_consent(self, request_id: str, *, agent: str | None) -> str:
        """End the pending request: the URL the browser goes back to, with a code for `agent`, or with
        error=access_denied when `agent` is None (denied). UserError if the request is unknown or expired, or
        the agent is not live (the request is ended either way: an approval is answered once)."""
        pending = self.pending_consent(request_id)
        if pending is None:
            raise UserError("this sign-in request is unknown, expired or already answered: start again from the "
                            "client (connect it again).")
        del self.pending[request_id]
        if agent is None:
            return construct_redirect_uri(pending.redirect_uri, error="access_denied",
                                          error_description="the operator denied the request",
                                          state=pending.state, iss=self.issuer)
        code = self.host.oauth.issue_code(
            client_id=pending.client_id, client_name=pending.client_name, redirect_uri=pending.redirect_uri,
            redirect_uri_explicit=pending.redirect_uri_explicit, code_challenge=pending.code_challenge,
            resource=pending.resource, scopes=pending.scopes, agent=agent,
        )
        return construct_redirect_uri(pending.redirect_uri, code=code, state=pending.state, iss=self.issuer)

    # -- the token endpoint ------------------------------------------------------------------------------------

    async def load_authorization_code(self, client: OAuthClientInformationFull,
                                      authorization_code: str) -> AuthorizationCode | None:
        # a used code is returned too: exchanging it again is a replay, which ends the grant it started
        record = await anyio.to_thread.run_sync(self.host.oauth.code, authorization_code)
        if record is None:
            return None
        return AuthorizationCode(
            code=authorization_code, scopes=list(record.scopes), expires_at=record.expires,
            client_id=record.client_id, code_challenge=record.code_challenge, redirect_uri=record.redirect_uri,
            redirect_uri_provided_explicitly=record.redirect_uri_explicit, resource=record.resource,
            subject=record.agent,
        )

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        try:
            tokens = await anyio.to_thread.run_sync(self.host.oauth.exchange_code, authorization_code.code,
                                                    client.client_id)
        except GrantError as exc:
            raise token_error(exc) from None
        return oauth_token(tokens)

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        # a spent (rotated-out) token is returned too: presenting it is a replay, which ends its grant
        found = await anyio.to_thread.run_sync(self.host.oauth.refresh_grant, refresh_token)
        if found is None:
            return None
        grant, _spent = found
        return RefreshToken(token=refresh_token, client_id=grant.client_id, scopes=list(grant.scopes),
                            resource=grant.resource, subject=grant.agent)

    async def exchange_refresh_token(self, client: OAuthClientInformationFull, refresh_token: RefreshToken,
                                     scopes: list[str]) -> OAuthToken:
        try:
            tokens = await anyio.to_thread.run_sync(self.host.oauth.refresh, refresh_token.token, client.client_id)
        except GrantError as exc:
            raise token_error(exc) from None
        return oauth_token(tokens)

    async def load_access_token(self, token: str) -> AccessToken | None:
        grant = await anyio.to_thread.run_sync(self.host.oauth.access_grant, token)
        if grant is None:
            return None
        return AccessToken(token=token, client_id=grant.client_id, scopes=list(grant.scopes),
                           resource=grant.resource, subject=grant.agent)

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        await anyio.to_thread.run_sync(self.host.oauth.revoke_token, token.token, token.client_id)
