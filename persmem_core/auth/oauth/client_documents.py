"""Client ID metadata documents: a client whose client_id is an https URL is described by the JSON at that URL.

Anyone can make the server fetch a URL (one `/authorize` request names it), so the fetch must not become a way
into the operator's network (SSRF) or a way to tie the server up:
- https only, no user name or password, no fragment, no `.`/`..` segments (the document draft's rules);
- the host is resolved first and refused when ANY of its addresses is not a public one (private, loopback,
  link-local, reserved, an IPv6 form carrying such an IPv4 address, ...), unless the operator named the host in
  `[oauth] client_document_private_hosts`: the core's SSRF rules (persmem_core.net.guard), as for web_fetch;
- the connection goes to the address checked, never to a second lookup (a DNS answer that changes between
  the check and the connect, "DNS rebinding", cannot redirect it); TLS still verifies the certificate for the
  host name (SNI), against the system trust store (ssl.create_default_context, which honours SSL_CERT_FILE);
- no redirects, 5 s for the whole fetch, at most 64 KB;
- the document must be a JSON object whose `client_id` is the URL exactly and whose redirect URIs are https
  or loopback http (the same rule as for registered clients).
Documents are kept in memory for a few minutes (a sign-in fetches each once); failures for a few seconds.
"""

from __future__ import annotations

import ipaddress
import json
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp.shared.auth import OAuthClientInformationFull
from pydantic import ValidationError

from persmem_core.errors import UserError
from persmem_core.net.guard import Guard
from persmem_core.net.resolver import Resolver
from persmem_core.text import control_characters

FETCH_SECONDS = 5.0
MAX_DOCUMENT_BYTES = 64 * 1024
MAX_URL_CHARS = 2048
CACHE_SECONDS = 300.0  # a document that was fetched well is used this long without asking again
FAILURE_CACHE_SECONDS = 10.0  # a failing URL is not fetched again at once (a client retrying, or a flood)
MAX_CACHED = 512
LOOPBACK_REDIRECT_HOSTS = ("127.0.0.1", "::1", "localhost")
ANYWHERE = [ipaddress.ip_network("0.0.0.0/0"), ipaddress.ip_network("::/0")]  # a host the operator allowed


class ClientDocumentError(Exception):
    """Why a client ID metadata document cannot be used; the message names the problem (it goes to the client)."""


def redirect_uri_problem(uri: str) -> str | None:
    """What is wrong with `uri` as a redirect URI, or None: https anywhere, or http to this computer's loopback
    (a desktop client's listener, any port). Everything else could carry the code to someone else."""
    try:
        parts = urlsplit(uri)
        hostname = parts.hostname
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        return f"redirect URI {uri!r} is not a valid URL"
    if parts.fragment or "#" in uri:
        return f"redirect URI {uri!r} has a fragment (#...), which OAuth forbids"
    if parts.username is not None or parts.password is not None:
        return f"redirect URI {uri!r} contains a user name or password"
    if parts.scheme == "https" and hostname:
        return None
    if parts.scheme == "http" and hostname in LOOPBACK_REDIRECT_HOSTS:
        return None
    return (f"redirect URI {uri!r} is neither https nor http on a loopback address (127.0.0.1, [::1], localhost); "
            "use an https URL, or a loopback listener for a program on the user's computer")


def document_url_problem(url: str) -> str | None:
    """What is wrong with `url` as a client ID metadata document URL, or None."""
    if len(url) > MAX_URL_CHARS:
        return f"the client_id URL is longer than {MAX_URL_CHARS} characters"
    if control_characters(url) or " " in url:
        return "the client_id URL contains spaces or control characters"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018
    except ValueError:
        return "the client_id is not a valid URL"
    if parts.scheme != "https" or not parts.hostname:
        return "a client_id URL must be an https URL"
    if parts.username is not None or parts.password is not None:
        return "a client_id URL must not contain a user name or password"
    if parts.fragment or "#" in url:
        return "a client_id URL must not contain a fragment (#...)"
    if parts.path in ("", "/"):
        return "a client_id URL must have a path (the document's address, e.g. https://example.com/client.json)"
    if any(segment in (".", "..") for segment in parts.path.split("/")):
        return "a client_id URL must not contain . or .. path segments"
    return None


@dataclass
class _Cached:
    expires: float
    client: OAuthClientInformationFull | None
    error: str | None


class ClientDocuments:
    """Fetches and checks client ID metadata documents, with a small in-memory cache."""

    def __init__(self, private_hosts_of):
        self._private_hosts_of = private_hosts_of  # -> the [oauth] client_document_private_hosts list, read per fetch
        self._cache: dict[str, _Cached] = {}
        self._ssl = ssl.create_default_context()
        self._resolver = Resolver()  # bounded lookups: a hung DNS server holds a few threads, not one per request

    async def fetch(self, url: str) -> OAuthClientInformationFull:
        """The client the document at `url` describes; ClientDocumentError naming the problem otherwise."""
        now = time.monotonic()
        cached = self._cache.get(url)
        if cached is not None and cached.expires > now:
            if cached.client is None:
                raise ClientDocumentError(cached.error)
            return cached.client
        try:
            client = await self._fetch(url)
        except ClientDocumentError as exc:
            self._remember(url, _Cached(now + FAILURE_CACHE_SECONDS, None, str(exc)))
            raise
        self._remember(url, _Cached(now + CACHE_SECONDS, client, None))
        return client

    def _remember(self, url: str, entry: _Cached) -> None:
        if len(self._cache) >= MAX_CACHED:
            now = time.monotonic()
            self._cache = {k: v for k, v in self._cache.items() if v.expires > now}
            while len(self._cache) >= MAX_CACHED:  # still full: the oldest entry goes
                self._cache.pop(next(iter(self._cache)))
        self._cache[url] = entry

    async def _fetch(self, url: str) -> OAuthClientInformationFull:
        problem = document_url_problem(url)
        if problem:
            raise ClientDocumentError(problem)
        try:
            with anyio.fail_after(FETCH_SECONDS):
                body = await self._download(url)
        except TimeoutError:
            raise ClientDocumentError(f"the client ID metadata document {url} did not arrive within "
                                      f"{FETCH_SECONDS:g} s") from None
        return self._parse(url, body)

    def _guard(self, hostname: str) -> Guard:
        allowed = {h.lower().strip("[]") for h in self._private_hosts_of()}
        return Guard(ANYWHERE if hostname.lower() in allowed else [], self._resolver,
                     what="fetching a client ID metadata document",
                     allow_hint="the operator can allow a host with [oauth] client_document_private_hosts")

    async def _download(self, url: str) -> bytes:
        hostname = urlsplit(url).hostname or ""
        try:
            target = await self._guard(hostname).check(url)
        except UserError as exc:
            raise ClientDocumentError(f"the client_id URL's host cannot be used: {exc}") from None
        # The request goes to the checked address itself; Host and SNI name the host, so TLS checks its certificate.
        pinned, host_header, extensions = target.pinned()
        async with httpx2.AsyncClient(verify=self._ssl, follow_redirects=False, trust_env=False,
                                      timeout=FETCH_SECONDS) as http:
            request = http.build_request("GET", pinned, headers={**host_header, "Accept": "application/json"},
                                         extensions=extensions)
            try:
                response = await http.send(request, stream=True)
            except httpx2.ConnectError as exc:
                error = str(exc) or type(exc).__name__
                if "CERTIFICATE" in error.upper():
                    raise ClientDocumentError(f"the TLS certificate of {hostname} is not valid ({error})") from None
                raise ClientDocumentError(f"cannot connect to {hostname} for the client ID metadata document "
                                          f"({error})") from None
            except httpx2.HTTPError as exc:
                raise ClientDocumentError(f"fetching the client ID metadata document {url} failed "
                                          f"({type(exc).__name__}: {exc})") from None
            try:
                return await self._read(url, response)
            finally:
                await response.aclose()

    async def _read(self, url: str, response: httpx2.Response) -> bytes:
        if 300 <= response.status_code < 400:
            raise ClientDocumentError(f"the client ID metadata document {url} answered with a redirect "
                                      f"({response.status_code}); redirects are not followed: publish it at the "
                                      "client_id URL itself")
        if response.status_code != 200:
            raise ClientDocumentError(f"the client ID metadata document {url} answered HTTP {response.status_code}")
        body = b""
        async for chunk in response.aiter_bytes():
            body += chunk
            if len(body) > MAX_DOCUMENT_BYTES:
                raise ClientDocumentError(f"the client ID metadata document {url} is larger than "
                                          f"{MAX_DOCUMENT_BYTES // 1024} KB")
        return body

    @staticmethod
    def _parse(url: str, body: bytes) -> OAuthClientInformationFull:
        try:
            document = json.loads(body)
        except (UnicodeDecodeError, ValueError):
            raise ClientDocumentError(f"the client ID metadata document {url} is not JSON") from None
        if not isinstance(document, dict):
            raise ClientDocumentError(f"the client ID metadata document {url} is not a JSON object")
        if document.get("client_id") != url:
            raise ClientDocumentError(f"the client ID metadata document {url} names another client_id "
                                      f"({str(document.get('client_id'))[:200]!r}); it must be its own URL exactly")
        for field_name in ("client_name", "client_uri"):
            if control_characters(str(document.get(field_name) or "")):
                raise ClientDocumentError(f"the client ID metadata document {url}: {field_name} contains control "
                                          "characters (escape sequences, line breaks, direction overrides)")
        method = document.get("token_endpoint_auth_method", "none")
        if method != "none":
            raise ClientDocumentError(f"the client ID metadata document {url} asks for token_endpoint_auth_method "
                                      f"{str(method)[:50]!r}; a client described by a document is a public client "
                                      "(\"none\"), it has no shared secret")
        for secret_field in ("client_secret", "client_secret_expires_at"):
            if secret_field in document:
                raise ClientDocumentError(f"the client ID metadata document {url} contains {secret_field}; a "
                                          "document is public and must not carry a secret")
        uris = document.get("redirect_uris")
        if not isinstance(uris, list) or not uris or not all(isinstance(u, str) for u in uris):
            raise ClientDocumentError(f"the client ID metadata document {url} has no redirect_uris (a list of URLs)")
        for uri in uris:
            problem = redirect_uri_problem(uri)
            if problem:
                raise ClientDocumentError(f"the client ID metadata document {url}: {problem}")
        try:
            return OAuthClientInformationFull.model_validate({**document, "token_endpoint_auth_method": "none"})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "the document"
            raise ClientDocumentError(f"the client ID metadata document {url} is not valid client metadata "
                                      f"({where}: {first['msg']})") from None
