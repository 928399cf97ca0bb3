"""The OAuth endpoints of a real `persmem serve`, with plain HTTP requests: discovery metadata, the 401 challenge,
dynamic registration, /authorize, /token and /revoke refusing bad input with the RFC's error (and nothing issued),
and client ID metadata documents fetched from a real HTTPS server (a throwaway CA the server trusts through
SSL_CERT_FILE) — or refused when they point at a private address or name another client.

The whole flow with the SDK's OAuth client and the consent page in Chromium is tests/test_oauth_flow.py.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import http.server
import ipaddress
import itertools
import json
import secrets
import ssl
import subprocess
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from persmem_core.net.addresses import free_port
from persmem_core.testing import MCP_HEADERS, MCP_INITIALIZE, clean_env, start_server, write_config
from persmem_core.transport.server_process import persmem_command
from persmem_core.transport.tool_answers import tool_result

DISABLED = "memory_hnsw,amq_maildir,shell,git,searxng,dashboard,sessions"
LOOPBACK_CALLBACK = "http://127.0.0.1:43123/callback"


# -- a throwaway CA and an HTTPS server for client ID metadata documents ------------------------------------------


def make_ca_and_leaf(folder: Path) -> tuple[Path, Path, Path]:
    """(CA certificate, leaf certificate for localhost/127.0.0.1, leaf key) as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "persmem test CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                       content_commitment=False, key_encipherment=False, data_encipherment=False,
                                       key_agreement=False, encipher_only=False, decipher_only=False), critical=True)
          .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
          .sign(ca_key, hashes.SHA256()))
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(leaf_key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5)).not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    paths = folder / "ca.pem", folder / "leaf.pem", folder / "leaf.key"
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(leaf_key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                                serialization.NoEncryption()))
    return paths


class DocumentServer:
    """HTTPS on 127.0.0.1 answering each path from `documents` (status, body); it notes every path asked for."""

    def __init__(self, cert: Path, key: Path):
        self.documents: dict[str, tuple[int, bytes, dict[str, str]]] = {}
        self.requested: list[str] = []
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                server.requested.append(self.path)
                status, body, headers = server.documents.get(self.path, (404, b"not found", {}))
                self.send_response(status)
                for name, value in {"Content-Type": "application/json", **headers}.items():
                    self.send_header(name, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.port = free_port()
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str, host: str = "localhost") -> str:
        return f"https://{host}:{self.port}{path}"

    def publish(self, path: str, document: dict | None = None, *, status: int = 200,
                headers: dict[str, str] | None = None, host: str = "localhost") -> str:
        url = self.url(path, host)
        body = json.dumps(document if document is not None else {}).encode()
        self.documents[path] = (status, body, headers or {})
        return url

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture(scope="module")
def documents(tmp_path_factory):
    ca, cert, key = make_ca_and_leaf(tmp_path_factory.mktemp("tls"))
    server = DocumentServer(cert, key)
    server.ca = ca
    yield server
    server.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory, documents):
    home = tmp_path_factory.mktemp("oauthendpoints")
    # SSE answers, so an MCP GET stream stays open (the streaming test)
    write_config(home, {"oauth": {"client_document_private_hosts": ["localhost"]}, "server": {"json_response": False}})
    env = clean_env(home, PERSMEM_DISABLE_PLUGINS=DISABLED, SSL_CERT_FILE=str(documents.ca))
    running = start_server(home, ("kite",), env)
    yield running
    running.stop()


# -- helpers ------------------------------------------------------------------------------------------------------

SOURCES = (f"127.0.0.{n}" for n in itertools.count(20))


def from_new_address(method: str, url: str, **kwargs) -> httpx2.Response:
    """A request expected to fail authentication, from a loopback address of its own: failures from one address
    are answered ever more slowly (auth_failures.py), which would only slow these tests down."""
    with httpx2.Client(transport=httpx2.HTTPTransport(local_address=next(SOURCES)), timeout=10) as http:
        return http.request(method, url, **kwargs)



def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


def register(server, redirect_uris: list[str], **extra) -> httpx2.Response:
    return httpx2.post(f"{server.base_url}/register", json={"redirect_uris": redirect_uris, "client_name": "Test",
                                                             **extra}, timeout=10)


def authorize(server, **params) -> httpx2.Response:
    return httpx2.get(f"{server.base_url}/authorize", params=params, follow_redirects=False, timeout=15)


def query_of(location: str) -> dict[str, str]:
    return {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}


def oauth_file(server) -> str:
    path = server.home / "oauth.json"
    return path.read_text() if path.exists() else ""


@pytest.fixture(scope="module")
def public_client(server):
    answer = register(server, [LOOPBACK_CALLBACK], token_endpoint_auth_method="none")
    assert answer.status_code == 201, answer.text
    return answer.json()


@pytest.fixture(scope="module")
def confidential_client(server):
    answer = register(server, ["https://app.example.com/oauth/callback"],
                      token_endpoint_auth_method="client_secret_post")
    assert answer.status_code == 201, answer.text
    return answer.json()


# -- discovery ----------------------------------------------------------------------------------------------------


def test_discovery_metadata_names_this_server_as_resource_and_issuer(server):
    base = server.base_url
    for path in ("/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"):
        answer = httpx2.get(base + path, timeout=10)
        assert answer.status_code == 200, (path, answer.text)
        assert answer.json() == {"resource": f"{base}/mcp", "authorization_servers": [base],
                                 "bearer_methods_supported": ["header"], "resource_name": "persmem"}
    answer = httpx2.get(f"{base}/.well-known/oauth-authorization-server", timeout=10)
    assert answer.status_code == 200
    methods = ["none", "client_secret_post", "client_secret_basic"]
    assert answer.json() == {
        "issuer": base,
        "authorization_endpoint": f"{base}/authorize",
        "token_endpoint": f"{base}/token",
        "registration_endpoint": f"{base}/register",
        "revocation_endpoint": f"{base}/revoke",
        "response_types_supported": ["code"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": methods,
        "revocation_endpoint_auth_methods_supported": methods,
        "code_challenge_methods_supported": ["S256"],
        "client_id_metadata_document_supported": True,
        "authorization_response_iss_parameter_supported": True,
    }
    assert f"sign in at {base}" in server.log()  # the startup line says where OAuth is


def test_every_401_points_to_the_protected_resource_metadata(server):
    challenge = (f'Bearer realm="persmem", resource_metadata="{server.base_url}'
                 f'/.well-known/oauth-protected-resource/mcp"')
    missing = httpx2.post(server.url, json={}, timeout=10)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"] == challenge
    for token in ("pmat_" + secrets.token_urlsafe(32), "pm_" + secrets.token_urlsafe(32), "nonsense"):
        wrong = from_new_address("POST", server.url, json={}, headers={"Authorization": f"Bearer {token}"})
        assert wrong.status_code == 401
        assert wrong.headers["www-authenticate"] == challenge + ', error="invalid_token"'
    # the agent's own bearer token still works
    assert server.call_tool("persmem_whoami", agent="kite")["agent"] == "kite"


# -- registration -------------------------------------------------------------------------------------------------


def test_registration_accepts_https_and_loopback_redirects_and_keeps_only_the_secret_hash(server):
    uris = ["https://claude.ai/api/mcp/auth_callback", "http://127.0.0.1:5555/cb", "http://localhost/cb",
            "http://[::1]:8080/callback"]
    answer = register(server, uris, client_name="Claude")
    assert answer.status_code == 201, answer.text
    client = answer.json()
    assert client["redirect_uris"] == uris
    assert client["token_endpoint_auth_method"] == "client_secret_post"
    secret = client["client_secret"]
    stored = oauth_file(server)
    assert client["client_id"] in stored
    assert secret not in stored
    assert hashlib.sha256(secret.encode()).hexdigest() in stored


@pytest.mark.parametrize("uri", ["http://app.example.com/callback", "http://192.168.1.20/callback",
                                 "myapp://callback", "https://app.example.com/cb#fragment"])
def test_registration_refuses_redirects_that_are_neither_https_nor_loopback(server, uri):
    before = oauth_file(server)
    answer = register(server, ["https://ok.example.com/cb", uri])
    assert answer.status_code == 400
    assert answer.json()["error"] == "invalid_redirect_uri"
    assert "https" in answer.json()["error_description"] or "fragment" in answer.json()["error_description"]
    assert oauth_file(server) == before  # nothing registered


def test_registration_is_bounded(server):
    before = oauth_file(server)
    many = register(server, [f"https://app.example.com/cb{n}" for n in range(21)])
    assert many.status_code == 400 and many.json()["error"] == "invalid_redirect_uri"
    bulky = register(server, ["https://app.example.com/cb"], contacts=["x" * 1000] * 10)
    assert bulky.status_code == 400 and bulky.json()["error"] == "invalid_client_metadata"
    huge = httpx2.post(f"{server.base_url}/register", content=b'{"redirect_uris": ["' + b"x" * 70000 + b'"]}',
                       headers={"Content-Type": "application/json"}, timeout=10)
    assert huge.status_code == 413
    assert oauth_file(server) == before


# -- /authorize ---------------------------------------------------------------------------------------------------


def test_authorize_sends_a_good_request_to_the_consent_page(server, public_client):
    _, challenge = pkce()
    for resource in ({"resource": server.url}, {}):
        answer = authorize(server, client_id=public_client["client_id"], response_type="code",
                           code_challenge=challenge, code_challenge_method="S256", redirect_uri=LOOPBACK_CALLBACK,
                           state="s1", **resource)
        assert answer.status_code == 302
        location = answer.headers["location"]
        assert location.startswith(f"{server.base_url}/oauth/consent?request=")
        assert "code=" not in location


def test_authorize_never_redirects_to_an_unregistered_uri(server, public_client):
    _, challenge = pkce()
    for redirect in ("https://attacker.example/steal", "http://127.0.0.1:43124/callback"):
        answer = authorize(server, client_id=public_client["client_id"], response_type="code",
                           code_challenge=challenge, redirect_uri=redirect, state="s2")
        assert answer.status_code == 400  # an open redirect would be a 302 to the attacker
        assert "location" not in answer.headers
        assert answer.json()["error"] == "invalid_request"
    unknown = authorize(server, client_id="no-such-client", response_type="code", code_challenge=challenge,
                        redirect_uri="https://attacker.example/steal")
    assert unknown.status_code == 400 and "location" not in unknown.headers


@pytest.mark.parametrize("pkce_params", [{}, {"code_challenge": "plain-verifier-" + "x" * 40,
                                              "code_challenge_method": "plain"},
                                         {"code_challenge": "short", "code_challenge_method": "S256"}])
def test_authorize_requires_pkce_s256(server, public_client, pkce_params):
    answer = authorize(server, client_id=public_client["client_id"], response_type="code",
                       redirect_uri=LOOPBACK_CALLBACK, state="s3", **pkce_params)
    # a client the operator never approved gets its error here, not at its redirect URI (no open redirector)
    assert answer.status_code == 400 and "location" not in answer.headers
    assert answer.json()["error"] == "invalid_request" and "code" not in answer.json()


def test_authorize_refuses_another_resource(server, public_client):
    _, challenge = pkce()
    answer = authorize(server, client_id=public_client["client_id"], response_type="code",
                       code_challenge=challenge, redirect_uri=LOOPBACK_CALLBACK, state="s4",
                       resource="https://other.example.com/mcp")
    assert answer.status_code == 400 and "location" not in answer.headers
    assert answer.json()["error"] == "invalid_target"


# -- /token and /revoke -------------------------------------------------------------------------------------------


def token(server, form: dict, **kwargs) -> httpx2.Response:
    return httpx2.post(f"{server.base_url}/token", data=form, timeout=10, **kwargs)


def failing_token(server, form: dict, **kwargs) -> httpx2.Response:
    return from_new_address("POST", f"{server.base_url}/token", data=form, **kwargs)


def test_token_endpoint_refuses_another_resource_unknown_clients_and_wrong_secrets(server, public_client,
                                                                                  confidential_client):
    verifier, _ = pkce()
    code_form = {"grant_type": "authorization_code", "code": secrets.token_urlsafe(32), "code_verifier": verifier,
                 "redirect_uri": LOOPBACK_CALLBACK, "client_id": public_client["client_id"]}

    other = token(server, code_form | {"resource": "https://other.example.com/mcp"})
    assert other.status_code == 400 and other.json()["error"] == "invalid_target"
    refresh = token(server, {"grant_type": "refresh_token", "refresh_token": "pmrt_x", "resource": "https://x/mcp",
                             "client_id": public_client["client_id"]})
    assert refresh.status_code == 400 and refresh.json()["error"] == "invalid_target"

    unknown_code = token(server, code_form | {"resource": server.url})
    assert unknown_code.status_code == 400 and unknown_code.json()["error"] == "invalid_grant"

    unknown_client = token(server, code_form | {"client_id": "no-such-client"})
    assert unknown_client.status_code == 401 and unknown_client.json()["error"] == "invalid_client"

    confidential = {"grant_type": "refresh_token", "refresh_token": "pmrt_" + secrets.token_urlsafe(32),
                    "client_id": confidential_client["client_id"]}
    for secret in (None, "wrong", confidential_client["client_secret"] + "x"):
        form = confidential | ({"client_secret": secret} if secret else {})
        wrong = failing_token(server, form)
        assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client", wrong.text
    right = token(server, confidential | {"client_secret": confidential_client["client_secret"]})
    assert right.status_code == 400 and right.json()["error"] == "invalid_grant"  # authenticated; no such token
    assert "access_token" not in oauth_file(server)
    assert '"grants": {}' in oauth_file(server)  # nothing was issued by any of these


def test_basic_client_authentication_passes_the_agent_middleware(server):
    client = register(server, ["https://basic.example.com/cb"],
                      token_endpoint_auth_method="client_secret_basic").json()
    form = {"grant_type": "refresh_token", "refresh_token": "pmrt_" + secrets.token_urlsafe(32),
            "client_id": client["client_id"]}
    right = token(server, form, auth=(client["client_id"], client["client_secret"]))
    assert right.status_code == 400 and right.json()["error"] == "invalid_grant"
    source = next(SOURCES)
    with httpx2.Client(transport=httpx2.HTTPTransport(local_address=source), timeout=10) as http:
        wrong = http.post(f"{server.base_url}/token", data=form, auth=(client["client_id"], "wrong"))
    assert wrong.status_code == 401 and wrong.json()["error"] == "invalid_client"
    assert f"persmem auth failure from {source}" in server.log()  # a wrong client secret is a failed credential
    revoke = httpx2.post(f"{server.base_url}/revoke", data={"token": "pmat_unknown", "client_id": client["client_id"]},
                         auth=(client["client_id"], client["client_secret"]), timeout=10)
    assert revoke.status_code == 200  # RFC 7009: an unknown token is not an error
    refused = from_new_address("POST", f"{server.base_url}/revoke", auth=(client["client_id"], "wrong"),
                               data={"token": "pmat_unknown", "client_id": client["client_id"]})
    assert refused.status_code == 401 and refused.json()["error"] == "invalid_client"


# -- client ID metadata documents ---------------------------------------------------------------------------------


def document(url: str, **extra) -> dict:
    return {"client_id": url, "client_name": "Doc Client", "redirect_uris": [LOOPBACK_CALLBACK], **extra}


def test_a_client_id_metadata_document_is_fetched_and_its_client_sent_to_consent(server, documents):
    url = documents.url("/clients/good.json")
    documents.publish("/clients/good.json", document(url, client_uri="https://doc-client.example"))
    _, challenge = pkce()
    answer = authorize(server, client_id=url, response_type="code", code_challenge=challenge,
                       redirect_uri=LOOPBACK_CALLBACK, state="d1", resource=server.url)
    assert answer.status_code == 302, answer.text
    assert answer.headers["location"].startswith(f"{server.base_url}/oauth/consent?request=")
    page = httpx2.get(answer.headers["location"], timeout=10)
    assert page.status_code == 200 and "Doc Client" in page.text
    assert documents.requested.count("/clients/good.json") == 1
    # a redirect URI the document does not list is refused without a redirect
    stray = authorize(server, client_id=url, response_type="code", code_challenge=challenge,
                      redirect_uri="https://attacker.example/cb")
    assert stray.status_code == 400 and "location" not in stray.headers
    assert documents.requested.count("/clients/good.json") == 1  # the document came from the cache


def test_a_document_naming_another_client_or_a_bad_redirect_is_refused(server, documents):
    _, challenge = pkce()
    cases = {
        "/clients/other.json": (document("https://elsewhere.example/client.json"), "names another client_id"),
        "/clients/http.json": (None, "neither https nor http on a loopback"),
        "/clients/secret.json": (None, "token_endpoint_auth_method"),
        "/clients/moved.json": (None, "redirect"),
    }
    for path, (doc, expected) in cases.items():
        url = documents.url(path)
        if path == "/clients/http.json":
            doc = document(url, redirect_uris=["http://app.example.com/cb"])
        elif path == "/clients/secret.json":
            doc = document(url, token_endpoint_auth_method="client_secret_basic")
        if path == "/clients/moved.json":
            documents.publish(path, status=302, headers={"Location": documents.url("/clients/good.json")})
        else:
            documents.publish(path, doc)
        answer = authorize(server, client_id=url, response_type="code", code_challenge=challenge,
                           redirect_uri=LOOPBACK_CALLBACK, state="d2")
        assert answer.status_code == 400 and "location" not in answer.headers, (path, answer.text)
        assert answer.json()["error"] == "invalid_request"
        assert expected in answer.json()["error_description"], (path, answer.json())


def test_a_document_on_a_private_address_is_not_fetched_without_the_operators_allowance(server, documents):
    _, challenge = pkce()
    url = documents.publish("/clients/private.json", host="127.0.0.1")
    documents.documents["/clients/private.json"] = (200, json.dumps(document(url)).encode(), {})
    answer = authorize(server, client_id=url, response_type="code", code_challenge=challenge,
                       redirect_uri=LOOPBACK_CALLBACK)
    assert answer.status_code == 400 and "location" not in answer.headers
    assert "resolves to 127.0.0.1, a private, loopback" in answer.json()["error_description"]
    assert "/clients/private.json" not in documents.requested  # never fetched
    # the token endpoint treats such a client as unknown
    refused = token(server, {"grant_type": "refresh_token", "refresh_token": "pmrt_x", "client_id": url})
    assert refused.status_code == 401 and refused.json()["error"] == "invalid_client"


# -- OAuth off ----------------------------------------------------------------------------------------------------


def test_with_oauth_off_nothing_is_served_and_the_startup_line_says_so(tmp_path):
    home = tmp_path / "home"
    write_config(home, {"oauth": {"enabled": False}})
    running = start_server(home, ("kite",), clean_env(home, PERSMEM_DISABLE_PLUGINS=DISABLED))
    try:
        answer = httpx2.post(running.url, json={}, timeout=10)
        assert answer.status_code == 401 and answer.headers["www-authenticate"] == 'Bearer realm="persmem"'
        metadata = httpx2.get(f"{running.base_url}/.well-known/oauth-authorization-server", timeout=10)
        assert metadata.status_code == 401  # not an open path: nothing there
        assert "oauth: off ([oauth] enabled = false)" in running.log()
        assert running.call_tool("persmem_whoami", agent="kite")["agent"] == "kite"
    finally:
        running.stop()


# -- an OAuth access token on the resource server ----------------------------------------------------------------


def cli(server, *args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(persmem_command(*args), env=server.env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def access_token_for(server, agent: str) -> tuple[str, str]:
    """(access token, client_id) of a fresh grant acting as `agent`: registration, /authorize, the consent form
    approved with a one-time code from `persmem oauth approve-code`, the code exchanged at /token."""
    client = register(server, [LOOPBACK_CALLBACK], token_endpoint_auth_method="none").json()
    verifier, challenge = pkce()
    consent = authorize(server, client_id=client["client_id"], response_type="code", code_challenge=challenge,
                        redirect_uri=LOOPBACK_CALLBACK, state="t1", resource=server.url).headers["location"]
    approval = cli(server, "oauth", "approve-code").stdout.split("approval code:")[1].split()[0]
    decided = httpx2.post(f"{server.base_url}/oauth/consent", timeout=30, follow_redirects=False, data={
        "request": query_of(consent)["request"], "agent": agent, "operator_secret": approval, "decision": "approve"})
    assert decided.status_code == 302, decided.text
    back = query_of(decided.headers["location"])
    assert back["state"] == "t1" and back["iss"] == server.base_url
    tokens = token(server, {"grant_type": "authorization_code", "code": back["code"], "code_verifier": verifier,
                            "redirect_uri": LOOPBACK_CALLBACK, "client_id": client["client_id"], "resource": server.url})
    assert tokens.status_code == 200, tokens.text
    return tokens.json()["access_token"], client["client_id"]


def mcp_session(server, headers: dict[str, str]) -> dict[str, str]:
    opened = httpx2.post(server.url, headers={**MCP_HEADERS, **headers}, json=MCP_INITIALIZE, timeout=10)
    assert opened.status_code == 200, opened.text
    session = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
    httpx2.post(server.url, headers={**MCP_HEADERS, **headers, **session},
                json={"jsonrpc": "2.0", "method": "notifications/initialized"}, timeout=10)
    return session


class StreamReader(threading.Thread):
    """Holds an MCP GET stream open in the background and notes when it ended."""

    def __init__(self, url: str, headers: dict[str, str]):
        super().__init__(daemon=True)
        self.url, self.headers = url, headers
        self.opened = threading.Event()
        self.status: int | None = None
        self.ended_at: float | None = None

    def run(self) -> None:
        try:
            with httpx2.stream("GET", self.url, headers=self.headers, timeout=30) as response:
                self.status = response.status_code
                self.opened.set()
                for _ in response.iter_lines():
                    pass
        except httpx2.HTTPError:
            pass
        finally:
            self.ended_at = time.monotonic()
            self.opened.set()


def test_an_oauth_token_acts_as_the_approved_agent_on_mcp_only_until_its_grant_is_revoked(server):
    access, client_id = access_token_for(server, "kite")
    bearer = {"Authorization": f"Bearer {access}"}
    assert access not in oauth_file(server)  # only its hash is kept

    async def whoami():
        async with httpx2.AsyncClient(headers=bearer, timeout=30) as http:
            async with Client(streamable_http_client(server.url, http_client=http)) as client:
                return await client.call_tool("persmem_whoami", {})

    assert tool_result(anyio.run(whoami))["agent"] == "kite"

    # its audience is /mcp: another path of this server does not take it
    elsewhere = from_new_address("GET", f"{server.base_url}/some/agent/path", headers=bearer)
    assert elsewhere.status_code == 401 and 'error="invalid_token"' in elsewhere.headers["www-authenticate"]

    # a session it opened belongs to the client acting as kite, not to kite's own token
    session = mcp_session(server, bearer)
    borrowed = httpx2.post(server.url, timeout=10, headers={**MCP_HEADERS, **server.headers("kite"), **session},
                           json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
    assert borrowed.status_code in (403, 404), borrowed.text

    # an open stream ends within a second of `persmem oauth revoke`, and the token is refused after
    stream = StreamReader(server.url, {"Accept": "text/event-stream", **bearer, **session})
    stream.start()
    assert stream.opened.wait(10) and stream.status == 200
    time.sleep(0.3)
    assert stream.is_alive()
    cli(server, "oauth", "revoke", client_id)
    revoked_at = time.monotonic()
    stream.join(5)
    assert stream.ended_at is not None and stream.ended_at - revoked_at < 1.5
    after = from_new_address("POST", server.url, headers={**MCP_HEADERS, **bearer}, json=MCP_INITIALIZE)
    assert after.status_code == 401 and 'error="invalid_token"' in after.headers["www-authenticate"]


def test_a_damaged_oauth_file_stops_sign_ins_with_a_clear_answer_and_nothing_else(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "oauth.json").write_text("{not json")
    running = start_server(home, ("kite",), clean_env(home, PERSMEM_DISABLE_PLUGINS=DISABLED))
    try:
        assert "the OAuth registry is damaged" in running.log()  # the startup lines say so
        assert running.call_tool("persmem_whoami", agent="kite")["agent"] == "kite"
        bearer = {"Authorization": "Bearer pmat_" + secrets.token_urlsafe(32)}
        refused = httpx2.post(running.url, headers={**MCP_HEADERS, **bearer}, json=MCP_INITIALIZE, timeout=10)
        assert refused.status_code == 401
        answer = register(running, [LOOPBACK_CALLBACK])
        assert answer.status_code == 503 and answer.json()["error"] == "temporarily_unavailable"
        assert str(home) not in answer.text  # the reason, with its path, is for the operator's log
        assert "Traceback" not in running.log()
    finally:
        running.stop()
