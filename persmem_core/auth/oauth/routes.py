"""The OAuth endpoints beside /mcp, and where they are (the issuer).

The SDK's handlers do the protocol work (`mcp.server.auth.handlers`); what is assembled here differs from the
SDK's `create_auth_routes` where persmem needs it to:
- the metadata says what this server does: public clients ("none"), client ID metadata documents, the RFC 9207
  `iss` parameter in the authorization response;
- the token endpoint refuses a `resource` (RFC 8707) other than this server's /mcp: the SDK passes it to no one;
- client secrets are kept as SHA-256 only, so client authentication compares hashes (the SDK compares plaintext);
- `/authorize` with a client ID metadata document URL that cannot be used says why (the SDK would only say
  "not found").
The paths are the SDK's defaults (/authorize, /token, /register, /revoke), so clients that guess them work too.
"""

from __future__ import annotations

import base64
import binascii
import collections
import functools
import hmac
import logging
import re
import time
from urllib.parse import parse_qsl, unquote, urlsplit

import anyio
from mcp.server.auth.handlers.authorize import AuthorizationHandler
from mcp.server.auth.handlers.metadata import MetadataHandler, ProtectedResourceMetadataHandler
from mcp.server.auth.handlers.register import RegistrationHandler
from mcp.server.auth.handlers.revoke import RevocationErrorResponse, RevocationHandler
from mcp.server.auth.handlers.token import TokenErrorResponse, TokenHandler
from mcp.server.auth.json_response import PydanticJSONResponse
from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.settings import ClientRegistrationOptions
from mcp.server.transport_security import RequestBodyLimitMiddleware
from mcp.shared.auth import OAuthClientInformationFull, OAuthMetadata, ProtectedResourceMetadata
from mcp.shared.inbound import MCP_PROTOCOL_VERSION_HEADER
from pydantic import AnyHttpUrl, ConfigDict, TypeAdapter
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, request_response
from starlette.types import ASGIApp

from persmem_core.auth.middleware import client_address
from persmem_core.errors import UserError
from persmem_core.net.addresses import is_loopback
from persmem_core.auth.oauth.client_documents import ClientDocumentError
from persmem_core.auth.agents import secret_sha256
from persmem_core.auth.oauth.provider import CONSENT_PATH, PersmemOAuthProvider, caller_address
from persmem_core.auth.oauth.store import GrantError, grant_state

AUTHORIZATION_PATH = "/authorize"
TOKEN_PATH = "/token"
REGISTRATION_PATH = "/register"
REVOCATION_PATH = "/revoke"
AS_METADATA_PATH = "/.well-known/oauth-authorization-server"
PRM_PATH = "/.well-known/oauth-protected-resource"
RESOURCE_PATH = "/mcp"
MAX_OAUTH_BODY_BYTES = 64 * 1024  # registrations and token forms are small; nothing here needs more
CLIENT_AUTH_METHODS = ["none", "client_secret_post", "client_secret_basic"]
REGISTRATIONS_PER_HOUR = 20  # from one address
CODE_VERIFIER = re.compile(r"[A-Za-z0-9._~-]{43,128}")  # RFC 7636 §4.1
NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}

log = logging.getLogger("persmem.oauth")
_URL = TypeAdapter(AnyHttpUrl, config=ConfigDict(url_preserve_empty_path=True))


def oauth_paths() -> tuple[str, ...]:
    """Every path the OAuth endpoints answer on: open to callers without an agent credential."""
    return (AUTHORIZATION_PATH, TOKEN_PATH, REGISTRATION_PATH, REVOCATION_PATH, CONSENT_PATH, AS_METADATA_PATH,
            PRM_PATH, PRM_PATH + RESOURCE_PATH)


def client_auth_paths() -> tuple[str, ...]:
    """The endpoints whose Authorization header is a client's credential (HTTP Basic), not an agent's."""
    return (TOKEN_PATH, REVOCATION_PATH, REGISTRATION_PATH)


def oauth_base_url(host, bind_host: str, port: int) -> str | None:
    """The issuer: [server] public_url, else this loopback address; None if clients could not reach either
    (a non-loopback bind without public_url: the browser and the client need the URL they use).

    Rendered the way the SDK renders issuer URLs (lower-case host, no default port), because clients compare
    the metadata's issuer and the authorization response's `iss` with it as strings."""
    public_url = host.config.server.public_url.rstrip("/")
    if public_url:
        base = public_url
    elif is_loopback(bind_host):
        shown = f"[{bind_host.strip('[]')}]" if ":" in bind_host else bind_host
        base = f"http://{shown}:{port}"
    else:
        return None
    return str(_URL.validate_python(base)).rstrip("/")


def resource_metadata_url(issuer: str) -> str:
    """RFC 9728 §3.1: the metadata of resource <issuer>/mcp is at <issuer>/.well-known/oauth-protected-resource/mcp."""
    parts = urlsplit(issuer)
    return f"{parts.scheme}://{parts.netloc}{PRM_PATH}{parts.path}{RESOURCE_PATH}"


def _cors(app: ASGIApp, methods: list[str]) -> ASGIApp:
    """As the SDK does: browser-based clients may read the metadata and call token/register/revoke."""
    return CORSMiddleware(app=app, allow_origins="*", allow_methods=methods,
                          allow_headers=[MCP_PROTOCOL_VERSION_HEADER, "Authorization", "Content-Type"])


def _limited(app: ASGIApp) -> ASGIApp:
    return RequestBodyLimitMiddleware(app, MAX_OAUTH_BODY_BYTES)


def _guarded(handler):
    """`handler`, answering a store that cannot be read (a damaged oauth.json) with 503 and the reason in the
    operator's log, not with a traceback; the client is told only that the server cannot sign it in now."""

    @functools.wraps(handler)
    async def guarded(request: Request) -> Response:
        try:
            return await handler(request)
        except UserError as exc:
            log.error("OAuth %s refused: %s", request.url.path, exc)
            return JSONResponse({"error": "temporarily_unavailable", "error_description": "this server cannot "
                                 "sign clients in right now; its operator's log says why"}, status_code=503,
                                headers=NO_STORE)

    return guarded


class HashedSecretAuthenticator(ClientAuthenticator):
    """The SDK's client authentication (client_secret_post, client_secret_basic, none) against the SHA-256 of
    the secret, which is all the store keeps (the provider puts it in `client_secret`). A wrong secret is a
    failed credential like any other: counted, delayed, logged for fail2ban."""

    def __init__(self, provider: PersmemOAuthProvider):
        super().__init__(provider)
        self.failures = provider.host.auth_failures

    async def authenticate_request(self, request: Request) -> OAuthClientInformationFull:
        form = await request.form()
        client_id = form.get("client_id")
        if not isinstance(client_id, str) or not client_id:
            raise AuthenticationError("client_id is missing from the form")
        client = await self.provider.get_client(client_id)
        if client is None:
            raise AuthenticationError("unknown client_id: register the client again")
        presented = self._presented_secret(request, form, client)
        if client.token_endpoint_auth_method == "none":
            return client
        if not client.client_secret:
            raise AuthenticationError("the client is registered for a client secret but has none on file: "
                                      "register again")
        if not presented or not hmac.compare_digest(secret_sha256(presented), client.client_secret):
            await anyio.sleep(self.failures.failed(client_address(request.scope)))
            raise AuthenticationError("the client secret is missing or wrong")
        return client

    @staticmethod
    def _presented_secret(request: Request, form, client: OAuthClientInformationFull) -> str | None:
        method = client.token_endpoint_auth_method
        if method == "client_secret_basic":
            header = request.headers.get("authorization", "")
            if not header.startswith("Basic "):
                raise AuthenticationError("this client authenticates with HTTP Basic (client_secret_basic): send "
                                          "an Authorization: Basic header")
            try:
                basic_id, sep, secret = base64.b64decode(header[6:], validate=True).decode("utf-8").partition(":")
            except (ValueError, UnicodeDecodeError, binascii.Error):
                raise AuthenticationError("the Authorization: Basic header is not valid") from None
            if not sep or unquote(basic_id) != client.client_id:
                raise AuthenticationError("the client_id in the Basic header differs from the form's")
            return unquote(secret)
        if method == "client_secret_post":
            secret = form.get("client_secret")
            return secret if isinstance(secret, str) else None
        if method == "none":
            return None
        raise AuthenticationError(f"unsupported client authentication method {method!r}")


class ResourceCheckingTokenHandler(TokenHandler):
    """The SDK's token endpoint, refusing a `resource` other than this server's (RFC 8707: the token would be
    bound to another audience) before anything else happens."""

    def __init__(self, provider: PersmemOAuthProvider, authenticator: ClientAuthenticator):
        super().__init__(provider, authenticator)
        self.resource = provider.resource

    async def handle(self, request: Request) -> Response:
        try:
            form = await request.form()
        except Exception:  # noqa: BLE001 - a body that is not a form: the SDK answers it as it does
            return await super().handle(request)
        verifier = form.get("code_verifier")
        if form.get("grant_type") == "authorization_code" and not (
                isinstance(verifier, str) and CODE_VERIFIER.fullmatch(verifier)):
            # RFC 7636 §4.1: 43-128 unreserved characters. A shorter one could be found from the challenge, which
            # travels in the browser's address bar; the SDK's handler takes any length.
            return self.response(TokenErrorResponse(
                error="invalid_request",
                error_description="code_verifier must be 43 to 128 characters of A-Z a-z 0-9 - . _ ~ (RFC 7636)"))
        resources = form.getlist("resource")
        if any(r != self.resource for r in resources):
            shown = str(next(r for r in resources if r != self.resource))[:200]
            return self.response(TokenErrorResponse(
                error="invalid_target",
                error_description=f"this server issues tokens only for the resource {self.resource}; the request "
                                  f"named {shown!r}"))
        try:
            return await super().handle(request)
        except GrantError as exc:  # the provider converts these; a safety net, so none becomes a 500
            return PydanticJSONResponse(
                content=TokenErrorResponse(error="invalid_grant", error_description=exc.description),
                status_code=400, headers=NO_STORE)


class BasicFriendlyRevocationHandler(RevocationHandler):
    """The SDK's RFC 7009 endpoint, except that a client authenticating with HTTP Basic need not also put a
    `client_secret` field in the form (the SDK's form model requires the field, so such clients got 400)."""

    async def handle(self, request: Request) -> Response:
        try:
            client = await self.client_authenticator.authenticate_request(request)
        except AuthenticationError as exc:
            # RFC 7009 §2.2.1 answers failed client authentication as RFC 6749 §5.2 does: invalid_client
            return JSONResponse({"error": "invalid_client", "error_description": exc.message}, status_code=401,
                                headers=NO_STORE)
        form = await request.form()
        token = form.get("token")
        if not isinstance(token, str) or not token:
            return PydanticJSONResponse(status_code=400, headers=NO_STORE, content=RevocationErrorResponse(
                error="invalid_request", error_description="the form must carry the token to revoke"))
        # RFC 7009: an access or refresh token of this client ends its grant; an unknown one is no error
        await anyio.to_thread.run_sync(self.provider.host.oauth.revoke_token, token, client.client_id)
        return Response(status_code=200, headers=NO_STORE)


class RateLimitedRegistrationHandler(RegistrationHandler):
    """The SDK's RFC 7591 endpoint, at most REGISTRATIONS_PER_HOUR from one address (kept in memory): one
    address cannot churn the registry, whose oldest grant-less clients make room for new ones."""

    def __init__(self, provider: PersmemOAuthProvider, options: ClientRegistrationOptions):
        super().__init__(provider, options=options)
        self.recent: dict[str, collections.deque[float]] = {}

    async def handle(self, request: Request) -> Response:
        now = time.monotonic()
        for address in [a for a, times in self.recent.items() if now - times[-1] > 3600]:
            del self.recent[address]  # forgotten an hour after its last registration: memory stays bounded
        times = self.recent.setdefault(client_address(request.scope), collections.deque())
        while times and now - times[0] > 3600:
            times.popleft()
        if len(times) >= REGISTRATIONS_PER_HOUR:
            return JSONResponse({"error": "invalid_client_metadata", "error_description":
                                 f"more than {REGISTRATIONS_PER_HOUR} client registrations from this address within an "
                                 "hour; register once and keep the client id"}, status_code=429, headers=NO_STORE)
        times.append(now)
        return await super().handle(request)


class DocumentAwareAuthorizationHandler(AuthorizationHandler):
    """The SDK's /authorize, except that
    - a client_id naming a metadata document that cannot be used is answered with the reason (400, no redirect:
      nothing vouches for the redirect URI);
    - an error for a client the operator never approved is answered here (400, no redirect) instead of sending
      the browser to that client's redirect URI: registration is open, so otherwise anyone could register
      https://evil.example/ and use this server's /authorize as a redirector to it (RFC 9700 §4.11.2)."""

    async def handle(self, request: Request) -> Response:
        caller_address.set(client_address(request.scope))  # provider.authorize keeps it with the pending consent
        params = request.query_params if request.method == "GET" else await request.form()
        client_id = params.get("client_id")
        if isinstance(client_id, str) and client_id.startswith("https://"):
            try:
                await self.provider.client_document(client_id)
            except ClientDocumentError as exc:
                return JSONResponse({"error": "invalid_request", "error_description": str(exc)},
                                    status_code=400, headers={"Cache-Control": "no-store"})
        response = await super().handle(request)
        location = response.headers.get("location", "")
        if not location or location.startswith(self.provider.issuer + CONSENT_PATH):
            return response
        grants = await anyio.to_thread.run_sync(self.provider.host.oauth.grants)
        if any(g.client_id == client_id and grant_state(g) == "active" for g in grants):
            return response  # a client the operator approved gets its errors where RFC 6749 sends them
        error = dict(parse_qsl(urlsplit(location).query))
        return JSONResponse({"error": error.get("error", "invalid_request"),
                             "error_description": error.get("error_description", "")},
                            status_code=400, headers={"Cache-Control": "no-store"})


def authorization_server_metadata(issuer: str, client_documents: bool) -> OAuthMetadata:
    return OAuthMetadata(
        issuer=issuer,
        authorization_endpoint=issuer + AUTHORIZATION_PATH,
        token_endpoint=issuer + TOKEN_PATH,
        registration_endpoint=issuer + REGISTRATION_PATH,
        revocation_endpoint=issuer + REVOCATION_PATH,
        response_types_supported=["code"],
        grant_types_supported=["authorization_code", "refresh_token"],
        token_endpoint_auth_methods_supported=CLIENT_AUTH_METHODS,
        revocation_endpoint_auth_methods_supported=CLIENT_AUTH_METHODS,
        code_challenge_methods_supported=["S256"],
        client_id_metadata_document_supported=client_documents,
        authorization_response_iss_parameter_supported=True,
    )


def protected_resource_metadata(issuer: str, resource: str) -> ProtectedResourceMetadata:
    return ProtectedResourceMetadata(resource=resource, authorization_servers=[issuer],
                                     bearer_methods_supported=["header"], resource_name="persmem")


def build_oauth_routes(host, issuer: str, resource: str) -> tuple[list[Route], PersmemOAuthProvider]:
    """The OAuth endpoints of the authorization server `issuer`, issuing tokens for `resource` only."""
    from persmem_core.auth.oauth.consent import consent_routes  # the page has its own module (and owner)

    config = host.section("oauth")
    provider = PersmemOAuthProvider(host, issuer=issuer, resource=resource)
    authenticator = HashedSecretAuthenticator(provider)
    as_metadata = MetadataHandler(authorization_server_metadata(issuer, config.client_documents))
    pr_metadata = ProtectedResourceMetadataHandler(protected_resource_metadata(issuer, resource))
    registration = RateLimitedRegistrationHandler(provider, ClientRegistrationOptions(enabled=True))
    token = ResourceCheckingTokenHandler(provider, authenticator)
    revocation = BasicFriendlyRevocationHandler(provider, authenticator)
    authorization = DocumentAwareAuthorizationHandler(provider)

    read_only = ["GET", "OPTIONS"]
    posted = ["POST", "OPTIONS"]
    routes = [
        Route(PRM_PATH + RESOURCE_PATH, endpoint=_cors(request_response(pr_metadata.handle), read_only),
              methods=read_only),
        Route(PRM_PATH, endpoint=_cors(request_response(pr_metadata.handle), read_only), methods=read_only),
        Route(AS_METADATA_PATH, endpoint=_cors(request_response(as_metadata.handle), read_only), methods=read_only),
        # no CORS for /authorize: a browser is sent there, no script calls it
        Route(AUTHORIZATION_PATH, endpoint=_limited(request_response(_guarded(authorization.handle))),
              methods=["GET", "POST"]),
        Route(TOKEN_PATH, endpoint=_cors(_limited(request_response(_guarded(token.handle))), posted),
              methods=posted),
        Route(REGISTRATION_PATH, endpoint=_cors(_limited(request_response(_guarded(registration.handle))), posted),
              methods=posted),
        Route(REVOCATION_PATH, endpoint=_cors(_limited(request_response(_guarded(revocation.handle))), posted),
              methods=posted),
    ]
    return routes + consent_routes(host, provider), provider
