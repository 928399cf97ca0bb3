"""The OAuth server attacked: someone who controls a client, a redirect URI, a metadata document host or a browser
tab, against a real `persmem serve`. Each test is one attack. The first group are the holes the attack review of
issue 18 found (each failed before its fix); the others are attacks already defended that the other OAuth test
modules do not try.

One server for the module (agents kite and wren; wren has only a secret path). Requests expected to fail come
from a loopback address of their own (127.0.0.N), so the per-address failure delay does not slow other tests.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import secrets
import subprocess
import threading
import time
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx2
import pytest

from persmem_core.auth.agents import AgentStore
from persmem_core.auth.oauth.records import ClientRecord
from persmem_core.auth.oauth.store import OAuthStore
from persmem_core.settings import OAuthConfig
from persmem_core.net.addresses import free_port
from persmem_core.testing import MCP_HEADERS, MCP_INITIALIZE, clean_env, start_server
from persmem_core.transport.server_process import persmem_command
from persmem_core.testing import write_config

DISABLED = "memory_hnsw,amq_maildir,shell,git,searxng,dashboard,sessions"
PASSPHRASE = "correct horse battery staple"
MAX_CLIENTS = 40  # small, so the registration flood at the end of the module is cheap


def new_store(home) -> OAuthStore:
    """The store the CLI uses, on the server's home (the server re-reads the file when it changes)."""
    return OAuthStore(home, AgentStore(home), lambda: OAuthConfig())


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("oauthattacks")
    write_config(home, {"oauth": {"max_clients": MAX_CLIENTS}})
    running = start_server(home, ("kite",), clean_env(home, PERSMEM_DISABLE_PLUGINS=DISABLED))
    running.wren_path = AgentStore(home).add("wren", token=False, secret_path=True).secret_path
    AgentStore(home).add("gone")
    AgentStore(home).revoke("gone")
    new_store(home).set_operator_password(PASSPHRASE)
    yield running
    running.stop()


# -- helpers ------------------------------------------------------------------------------------------------------

ADDRESSES = (f"127.0.0.{n}" for n in itertools.count(100))


def pkce(verifier: str | None = None) -> tuple[str, str]:
    verifier = verifier or secrets.token_urlsafe(48)
    return verifier, base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")


def query_of(location: str) -> dict[str, str]:
    return {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}


class Attacker:
    """One party on its own loopback address: registers a client, drives /authorize, the consent form, /token."""

    def __init__(self, server, address: str | None = None, *, register: bool = True, **metadata):
        self.server = server
        self.base = server.base_url
        self.address = address or next(ADDRESSES)
        self.http = httpx2.Client(transport=httpx2.HTTPTransport(local_address=self.address), timeout=30,
                                  follow_redirects=False)
        self.redirect_uri = f"http://127.0.0.1:{free_port()}/callback"
        self.verifier, self.challenge = pkce()
        if register:
            answer = self.register([self.redirect_uri], **metadata)
            assert answer.status_code == 201, answer.text
            self.client_id = answer.json()["client_id"]

    def register(self, redirect_uris: list[str], **metadata) -> httpx2.Response:
        return self.http.post(f"{self.base}/register", json={
            "client_name": "attacker", "redirect_uris": redirect_uris, "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"], **metadata})

    def authorize(self, **params: str) -> httpx2.Response:
        return self.http.get(f"{self.base}/authorize", params={
            "response_type": "code", "client_id": self.client_id, "redirect_uri": self.redirect_uri,
            "code_challenge": self.challenge, "code_challenge_method": "S256", "state": "st", **params})

    def open_consent(self, **params: str) -> str:
        answer = self.authorize(**params)
        assert answer.status_code == 302, answer.text
        return query_of(answer.headers["location"])["request"]

    def post_consent(self, request_id: str, timeout: float = 30, **fields: str) -> httpx2.Response:
        return self.http.post(f"{self.base}/oauth/consent", data={"request": request_id, **fields},
                              headers={"Origin": self.base}, timeout=timeout)

    def approve(self, agent: str = "kite", **params: str) -> str:
        answer = self.post_consent(self.open_consent(**params), agent=agent, operator_secret=PASSPHRASE,
                                   decision="approve")
        assert answer.status_code == 302, answer.text
        return query_of(answer.headers["location"])["code"]

    def token(self, **form: str) -> httpx2.Response:
        return self.http.post(f"{self.base}/token", data={"client_id": self.client_id, **form})

    def exchange(self, code: str, verifier: str | None = None) -> httpx2.Response:
        return self.token(grant_type="authorization_code", code=code, redirect_uri=self.redirect_uri,
                          code_verifier=verifier or self.verifier)


def no_traceback(server) -> None:
    assert "Traceback" not in server.log()


# == holes the attack review found, fixed ======================================================================================


def test_a_guesser_that_sends_its_guesses_in_parallel_is_held_back_like_one_that_waits(server):
    """The failure delay (auth_failures.py) is applied AFTER the secret was checked, to the failed answer only:
    an attacker who does not wait for answers gets every guess evaluated at once, and a right guess is answered
    without delay however many wrong ones came before it from that address. Here: ten wrong passphrases sent
    together from one address, then the right one from the same address a second later, is approved at once."""
    guesser = Attacker(server)
    requests = [guesser.open_consent() for _ in range(3)]  # 4 guesses per request stay under its 5-try drop
    winner = guesser.open_consent()

    def guess(n: int) -> None:
        try:
            guesser.post_consent(requests[n // 4], timeout=1.5, agent="kite", operator_secret=f"wrong guess {n:04}",
                                 decision="approve")
        except httpx2.TimeoutException:
            pass  # an attacker does not wait for its answers

    threads = [threading.Thread(target=guess, args=(n,)) for n in range(10)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    try:
        right = guesser.post_consent(winner, timeout=2.5, agent="kite", operator_secret=PASSPHRASE,
                                     decision="approve")
        approved_at_once = right.status_code == 302
    except httpx2.TimeoutException:
        approved_at_once = False  # held back: what a fix does (or it refuses outright)
    for thread in threads:
        thread.join()
    assert f"persmem auth failure from {guesser.address}" in server.log()
    assert not approved_at_once


def test_the_consent_form_does_not_confirm_agent_names_without_the_operator_secret(server):
    """Anyone can open a consent page (registration is open): neither the page nor the answer to a wrong secret
    names an agent, and without the operator secret a name that is no agent gets the same answer as a real one."""
    prober = Attacker(server)
    request_id = prober.open_consent()
    page = prober.http.get(f"{prober.base}/oauth/consent", params={"request": request_id})
    assert page.status_code == 200 and "kite" not in page.text and "wren" not in page.text
    real = prober.post_consent(request_id, agent="kite", operator_secret="not the secret", decision="approve")
    made_up = prober.post_consent(request_id, agent="no-such-agent", operator_secret="not the secret",
                                  decision="approve")
    assert real.status_code == 401 and "location" not in real.headers
    assert "location" not in made_up.headers
    assert made_up.status_code == real.status_code
    assert made_up.text.replace("no-such-agent", "kite") == real.text  # the same page, with what was typed


def test_oauth_clients_shows_no_control_characters_a_client_registered(server):
    hostile = "Claude\x1b]0;owned\x07\x1b[2J\nforged-row  kite  active"
    refused = Attacker(server, register=False).register(["http://127.0.0.1:9/cb"], client_name=hostile)
    assert refused.status_code == 400 and "control characters" in refused.json()["error_description"]
    # a client on file from before that rule (or edited in by hand) is still printed harmlessly
    new_store(server.home).register_client(ClientRecord(client_id="old-client", client_name=hostile,
                                                        redirect_uris=["http://127.0.0.1:9/cb"]))
    listed = subprocess.run(persmem_command("oauth", "clients"), env=server.env, capture_output=True, text=True,
                            timeout=60)
    assert listed.returncode == 0, listed.stderr
    assert "Claude" in listed.stdout
    assert not any(ch in listed.stdout for ch in "\x1b\x07\r\x00")
    assert not any(line.startswith("forged-row") for line in listed.stdout.splitlines())


def test_authorize_is_no_open_redirector_for_clients_nobody_approved(server):
    """Registration is open: a stranger registers https://evil.example/ and links people to this server's
    /authorize with a bad parameter. The error is answered here; only a client the operator approved before gets
    its errors at its redirect URI (RFC 9700 §4.11.2)."""
    stranger = Attacker(server, register=False)
    registered = stranger.register(["https://evil.example/landing"])
    assert registered.status_code == 201, registered.text
    stranger.client_id, stranger.redirect_uri = registered.json()["client_id"], "https://evil.example/landing"
    for bad in ({"code_challenge_method": "plain"}, {"resource": "https://other.example/mcp"},
                {"response_type": "token"}):
        answer = stranger.authorize(**bad)
        assert answer.status_code == 400 and "location" not in answer.headers, (bad, answer.headers)
    approved = Attacker(server)
    approved.exchange(approved.approve())  # the operator approved this one: RFC 6749's redirect applies
    answer = approved.authorize(code_challenge_method="plain")
    assert answer.status_code == 302 and answer.headers["location"].startswith(approved.redirect_uri)
    assert query_of(answer.headers["location"])["error"] == "invalid_request"


def test_a_code_verifier_shorter_than_rfc_7636_allows_is_refused(server):
    client = Attacker(server)
    client.verifier, client.challenge = pkce("a")  # its S256 challenge looks like any other
    code = client.approve()
    answer = client.exchange(code)
    assert answer.status_code == 400 and answer.json()["error"] in ("invalid_request", "invalid_grant")
    assert "access_token" not in answer.text


def test_a_flood_of_authorize_requests_does_not_end_the_operators_pending_consent(server):
    operator_side = Attacker(server)
    request_id = operator_side.open_consent()
    flooder = Attacker(server)
    for _ in range(500):
        assert flooder.authorize().status_code == 302
    page = operator_side.http.get(f"{server.base_url}/oauth/consent", params={"request": request_id})
    assert page.status_code == 200


# == attacks already defended (not tried elsewhere) ===============================================================


@pytest.mark.parametrize("uri", [
    "http://127.0.0.1.evil.example/cb",  # loopback-looking name
    "http://localhost@evil.example/cb",  # userinfo
    "http://evil.example\\@127.0.0.1/cb",  # a backslash the URL parser reads as a path
    "http://[::ffff:127.0.0.1]/cb",  # IPv4-mapped: not one of the loopback forms clients use
    "http://localhost./cb",
    "javascript://127.0.0.1/%0aalert(1)",
    "data:text/html,<script>alert(1)</script>",
])
def test_registration_refuses_redirect_uris_that_only_look_local(server, uri):
    answer = Attacker(server, register=False).register(["https://ok.example.com/cb", uri])
    assert answer.status_code == 400 and answer.json()["error"] in ("invalid_redirect_uri", "invalid_client_metadata")


def test_authorize_matches_the_redirect_uri_exactly(server):
    client = Attacker(server)
    registered = client.redirect_uri
    port = urlsplit(registered).port
    for variant in (registered + "/", registered.upper().replace("HTTP://", "http://"), registered + "?x=1",
                    f"http://localhost:{port}/callback", f"http://127.0.0.1:{port + 1}/callback",
                    f"http://user@127.0.0.1:{port}/callback", registered.replace("/callback", "/callback/../evil")):
        answer = client.authorize(redirect_uri=variant)
        assert answer.status_code == 400 and "location" not in answer.headers, (variant, answer.text)


def test_token_and_authorize_take_only_this_servers_exact_resource(server):
    client = Attacker(server)
    base, port = server.base_url, server.port
    variants = [server.url + "/", f"http://localhost:{port}/mcp", f"http://127.0.0.1:{port + 1}/mcp",
                f"{base}/{server.wren_path}/mcp", f"{base}/MCP", base]
    for resource in variants:
        answer = client.token(grant_type="refresh_token", refresh_token="pmrt_x", resource=resource)
        assert answer.status_code == 400 and answer.json()["error"] == "invalid_target", resource
        refused = client.authorize(resource=resource)  # a client nobody approved: answered here, not redirected
        assert refused.status_code == 400 and refused.json()["error"] == "invalid_target", resource
    form = urlencode([("client_id", client.client_id), ("grant_type", "refresh_token"), ("refresh_token", "pmrt_x"),
                      ("resource", server.url), ("resource", "https://evil.example/mcp")])
    both = client.http.post(f"{base}/token", content=form,
                            headers={"Content-Type": "application/x-www-form-urlencoded"})
    assert both.status_code == 400 and both.json()["error"] == "invalid_target"


def test_another_client_can_neither_spend_nor_burn_a_code_or_refresh_token(server):
    victim, thief = Attacker(server), Attacker(server)
    code = victim.approve()
    stolen = thief.token(grant_type="authorization_code", code=code, redirect_uri=victim.redirect_uri,
                         code_verifier=victim.verifier)
    assert stolen.status_code == 400 and stolen.json()["error"] == "invalid_grant"
    tokens = victim.exchange(code)
    assert tokens.status_code == 200, tokens.text  # the thief's try did not use the code up
    refresh = tokens.json()["refresh_token"]
    stolen = thief.token(grant_type="refresh_token", refresh_token=refresh)
    assert stolen.status_code == 400 and stolen.json()["error"] == "invalid_grant"
    assert victim.token(grant_type="refresh_token", refresh_token=refresh).status_code == 200  # not seen as a replay


def test_consent_gives_no_code_for_a_revoked_or_unlisted_agent(server):
    client = Attacker(server)
    for agent in ("gone", "default", "kite\n", "../kite", ""):
        answer = client.post_consent(client.open_consent(), agent=agent, operator_secret=PASSPHRASE,
                                     decision="approve")
        assert answer.status_code == 401 and "location" not in answer.headers, agent  # as for a wrong secret


def test_an_oauth_token_does_not_ride_another_agents_secret_path(server):
    client = Attacker(server)
    access = client.exchange(client.approve("kite")).json()["access_token"]
    bearer = {**MCP_HEADERS, "Authorization": f"Bearer {access}"}
    assert client.http.post(server.url, headers=bearer, json=MCP_INITIALIZE).status_code == 200
    riding = client.http.post(f"{server.base_url}/{server.wren_path}/mcp", headers=bearer, json=MCP_INITIALIZE)
    assert riding.status_code == 401


@pytest.mark.parametrize("host", ["127.1", "2130706433", "[::ffff:7f00:1]", "169.254.169.254", "[64:ff9b::a9fe:a9fe]",
                                  "0.0.0.0", "10.0.0.1"])
def test_a_client_metadata_document_on_a_private_address_is_refused_in_any_spelling(server, host):
    client = Attacker(server, register=False)
    client.client_id = f"https://{host}:{free_port()}/client.json"
    answer = client.authorize()
    assert answer.status_code == 400 and "location" not in answer.headers
    assert "non-public" in answer.json()["error_description"]


def test_bodies_that_are_not_what_an_endpoint_reads_are_clear_errors(server):
    client = Attacker(server)
    cases = [
        ("/token", b"grant_type=authorization_code&code=\xff\xfe&client_id=\xff", "application/x-www-form-urlencoded"),
        ("/token", b"--x\r\n", "multipart/form-data; boundary=x"),
        ("/token", b"{}", "application/json"),
        ("/register", b"\xff\xfe", "application/json"),
        ("/register", b"[]", "application/json"),
        ("/revoke", b"token=\xff&client_id=" + client.client_id.encode(), "application/x-www-form-urlencoded"),
        ("/authorize", b"--x\r\n", "multipart/form-data; boundary=x"),
        ("/authorize", b"client_id=\xff", "application/x-www-form-urlencoded"),
        ("/oauth/consent", b"request=\xff&decision=approve", "application/x-www-form-urlencoded"),
    ]
    for path, body, content_type in cases:
        answer = client.http.post(server.base_url + path, content=body,
                                  headers={"Content-Type": content_type, "Origin": server.base_url})
        assert 200 <= answer.status_code < 500, (path, answer.status_code, answer.text)
        assert "access_token" not in answer.text
    no_traceback(server)


def test_a_loopback_server_whose_agents_have_no_credentials_approves_nobody(tmp_path):
    """No agent has credentials: loopback callers act as the default agent. OAuth is on (a loopback issuer), and
    even with an operator passphrase set nobody can be approved: there is no agent to act as."""
    home = tmp_path / "home"
    home.mkdir()
    running = start_server(home, (), clean_env(home, PERSMEM_DISABLE_PLUGINS=DISABLED))
    try:
        new_store(home).set_operator_password(PASSPHRASE)
        client = Attacker(running)
        request_id = client.open_consent()
        page = client.http.get(f"{running.base_url}/oauth/consent", params={"request": request_id})
        assert "persmem agent add" in page.text and 'value="approve"' not in page.text
        for agent in ("default", ""):
            answer = client.post_consent(request_id, agent=agent, operator_secret=PASSPHRASE, decision="approve")
            assert answer.status_code == 401 and "location" not in answer.headers  # as for a wrong secret
        assert '"grants": {}' in (home / "oauth.json").read_text()
    finally:
        running.stop()


# == last: fills the module server's client registry ==============================================================


def test_one_address_cannot_fill_the_client_registry(server):
    flooder = Attacker(server, register=False)
    for _ in range(MAX_CLIENTS + 1):
        if flooder.register(["https://flood.example/cb"]).status_code != 201:
            break
    newcomer = Attacker(server, register=False).register(["https://claude.example/cb"], client_name="Claude")
    assert newcomer.status_code == 201, newcomer.text
