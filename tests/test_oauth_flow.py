"""Issue 18's acceptance test: a remote MCP client connects with OAuth 2.1 and acts as the agent the operator chose.

One real `persmem serve` (agents kite and wren). The main flow is the MCP SDK's own client OAuth
(`OAuthClientProvider`) against it, the consent page submitted in headless Chromium as the operator:
discovery -> dynamic registration -> authorize -> consent (agent kite, the operator passphrase set with the real
`persmem oauth password`) -> token -> persmem_whoami is kite -> the access token expires and the client
refreshes -> RFC 7009 revoke -> 401. Once with a handshake-era client (mode="legacy") and once with a 2026-07-28
client. The readable transcript of that flow (methods, paths, statuses; no secrets) is written to
test-artifacts/oauth_flow.txt.

Then each bad input that needs a consent first, driven with httpx2 (the browser adds nothing there): consent
without or with a wrong operator secret, deny, a reused code, a wrong PKCE verifier, a replayed refresh token,
`persmem agent revoke`, an expired access token. Each is answered with the RFC's error and nothing is issued.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import itertools
import json
import re
import secrets
import subprocess
import time
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2
import pytest

from persmem_core.net.addresses import free_port
from persmem_core.testing import MCP_HEADERS, MCP_INITIALIZE, async_chromium_browser, clean_env, start_server
from persmem_core.testing import write_config
from persmem_core.transport.server_process import persmem_command
from persmem_core.transport.tool_answers import tool_result

ARTIFACTS = Path(__file__).parent.parent / "test-artifacts"
PASSPHRASE = "correct horse battery staple"
ACCESS_SECONDS = 4  # short, so the flow sees a refresh and an expired token without a long wait
DISABLED = "memory_hnsw,amq_maildir,shell,git,searxng,dashboard,sessions"  # whoami is the core's


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("oauthhome")
    write_config(home, {"oauth": {"access_token_seconds": ACCESS_SECONDS}})
    env = clean_env(home, PERSMEM_DISABLE_PLUGINS=DISABLED)
    running = start_server(home, ("kite", "wren"), env)
    set_password = cli(running, "oauth", "password", input=PASSPHRASE + "\n")
    assert set_password.returncode == 0, set_password.stderr
    yield running
    running.stop()


def cli(server, *args: str, input: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(persmem_command(*args), env=server.env, input=input, capture_output=True, text=True,
                          timeout=60)


# -- the main flow: the SDK's OAuth client, the consent page in Chromium ------------------------------------------


class Transcript:
    """Who sent what where and what came back: method, path, status, and what the request was about (the
    JSON-RPC method and MCP-Protocol-Version, the grant type, the consent decision and agent, the 401's error).
    Never a query string, a token, a code or a secret: this goes into the issue's note."""

    def __init__(self):
        self.lines: list[str] = []

    def note(self, text: str) -> None:
        self.lines.append(text)

    def request(self, who: str, method: str, url: str, status: int | str, about: str = "") -> None:
        self.lines.append(f"  {who:<8} {method:<6} {urlsplit(url).path:<44} {status}  {about}".rstrip())

    async def on_response(self, response: httpx2.Response) -> None:  # an httpx2 event hook
        request = response.request
        about = []
        if request.url.path == "/mcp" and request.method == "POST":
            message = json.loads(request.content)
            about.append(message.get("method", "(a response)") if isinstance(message, dict) else "(a batch)")
        if "mcp-protocol-version" in request.headers:
            about.append(f"MCP-Protocol-Version {request.headers['mcp-protocol-version']}")
        if request.url.path == "/token":
            about += [f"grant_type={v}" for v in parse_qs(request.content.decode()).get("grant_type", [])]
        if "authorization" in request.headers:
            about.append("with a bearer token")
        if response.status_code == 401:
            error = re.search(r'error="([^"]+)"', response.headers.get("www-authenticate", ""))
            about.append(f"WWW-Authenticate: Bearer {'error=' + error.group(1) + ', ' if error else ''}"
                         "resource_metadata=...")
        self.request("client", request.method, str(request.url), response.status_code, ", ".join(about))


class MemoryTokenStorage:
    """The SDK's TokenStorage in memory, keeping every token set it was given (so a test can replay an old one)."""

    def __init__(self):
        self.history = []
        self.client_info = None

    async def get_tokens(self):
        return self.history[-1] if self.history else None

    async def set_tokens(self, tokens) -> None:
        self.history.append(tokens)

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, client_info) -> None:
        self.client_info = client_info


class LoopbackCallback:
    """The client's redirect URI: a listener on a loopback port, as a desktop MCP client runs one. It answers the
    browser with a short page and hands the query (code, state, iss) to the waiting client."""

    def __init__(self, transcript: Transcript):
        self.transcript = transcript
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/callback"
        self.queries: list[dict[str, str]] = []
        self.requests: list[tuple[str, str]] = []
        self.arrived = asyncio.Event()

    async def __aenter__(self):
        self.listener = await asyncio.start_server(self.answer, "127.0.0.1", self.port)
        return self

    async def __aexit__(self, *exc):
        self.listener.close()
        await self.listener.wait_closed()

    async def answer(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        method, target, _ = (await reader.readline()).decode("latin-1").split(" ", 2)
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        body = b"<p>Connected. You can close this tab.</p>"
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nConnection: close\r\n"
                     b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()
        if urlsplit(target).path == "/callback":
            self.requests.append((method, target))
            self.queries.append({name: values[0] for name, values in parse_qs(urlsplit(target).query).items()})
            self.arrived.set()


class ConsentInBrowser:
    """The SDK's redirect_handler and callback_handler: the authorization URL opens in Chromium, where the operator
    picks the agent, types the passphrase and approves; the browser is sent to the client's loopback listener,
    whose code, state and iss go to the client."""

    def __init__(self, page, callback: LoopbackCallback, server, agent: str):
        self.page, self.callback, self.server, self.agent = page, callback, server, agent
        self.consents = 0  # how often the client sent the operator to the consent page

    async def redirect_handler(self, authorization_url: str) -> None:
        self.consents += 1
        if self.consents > 1:  # the server refused the client's token; the operator does not approve again
            self.callback.transcript.note("  (the client asks for a new consent; the test declines)")
            raise ReauthorizationAsked("the client was sent to consent again")
        page = self.page
        await page.goto(authorization_url)
        assert urlsplit(page.url).path == "/oauth/consent"
        title = await page.title()
        assert title == "Allow persmem oauth test to use persmem?", title
        text = await page.inner_text("body")
        assert f"sent back to http://127.0.0.1:{self.callback.port}" in text  # where the code goes, shown
        assert "kite" not in text and "wren" not in text  # anyone can open this page: it names no agent
        await page.screenshot(path=str(ARTIFACTS / "oauth_consent.png"), full_page=True)
        await page.fill("input[name=agent]", self.agent)
        await page.fill("input[name=operator_secret]", PASSPHRASE)
        await page.click("button[value=approve]")
        with anyio.fail_after(20):
            await self.callback.arrived.wait()
        await page.wait_for_load_state()
        assert "Connected" in await page.inner_text("body")
        method, target = self.callback.requests[-1]
        self.callback.transcript.request("browser", method, target, 200, "the client's loopback listener: code, "
                                         "state and iss go to the SDK's callback_handler")

    async def callback_handler(self):
        from mcp.shared.auth import AuthorizationCodeResult

        query = self.callback.queries[-1]
        assert "code" in query, query
        return AuthorizationCodeResult(code=query["code"], state=query.get("state"), iss=query.get("iss"))

    def watch(self, transcript: Transcript) -> None:
        """Put the browser's requests to persmem in the transcript."""
        ours = urlsplit(self.server.base_url).netloc

        def on_response(response) -> None:
            if urlsplit(response.url).netloc == ours:
                about = ""
                if response.request.method == "POST":  # the decision; the operator secret is not shown
                    form = parse_qs(response.request.post_data or "")
                    about = ", ".join(f"{k}={form[k][0]}" for k in ("decision", "agent") if k in form)
                    about += ", operator_secret=(the passphrase)"
                transcript.request("browser", response.request.method, response.url, response.status, about)

        self.page.on("response", on_response)


class ReauthorizationAsked(Exception):
    """The SDK's client wanted the operator again: the server refused its token."""


async def connector_flow(server, page, transcript: Transcript, mode: str) -> list[str]:
    """The flow for one client; returns the secrets it saw (none may appear in a log or the transcript)."""
    from mcp import Client
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import OAuthClientMetadata

    async with LoopbackCallback(transcript) as callback:
        return await run_client(server, page, callback, transcript, mode)


async def run_client(server, page, callback: LoopbackCallback, transcript: Transcript, mode: str) -> list[str]:
    from mcp import Client
    from mcp.client.auth import OAuthClientProvider
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import OAuthClientMetadata

    consent = ConsentInBrowser(page, callback, server, agent="kite")
    consent.watch(transcript)
    storage = MemoryTokenStorage()
    oauth = OAuthClientProvider(
        server_url=server.url,
        client_metadata=OAuthClientMetadata(client_name="persmem oauth test", redirect_uris=[callback.url],
                                            grant_types=["authorization_code", "refresh_token"],
                                            response_types=["code"], token_endpoint_auth_method="none"),
        storage=storage, redirect_handler=consent.redirect_handler, callback_handler=consent.callback_handler,
    )
    async with httpx2.AsyncClient(auth=oauth, timeout=30, event_hooks={"response": [transcript.on_response]}) as http:
        transcript.note("# first call: no token -> discovery, registration, consent as kite, token, the call")
        async with Client(streamable_http_client(server.url, http_client=http), mode=mode) as client:
            who = tool_result(await client.call_tool("persmem_whoami", {}))
            assert who["agent"] == "kite", who
            assert callback.queries[-1]["iss"] == server.base_url  # RFC 9207
            transcript.note(f"# the access token expires ({ACCESS_SECONDS} s here): the client refreshes it")
            await anyio.sleep(ACCESS_SECONDS + 0.5)
            who = tool_result(await client.call_tool("persmem_whoami", {}))
            assert who["agent"] == "kite", who
        assert len(storage.history) == 2  # the token from the code, then the refreshed one
        first, current = storage.history
        assert current.refresh_token != first.refresh_token and current.access_token != first.access_token

        transcript.note("# the client revokes its grant (RFC 7009); the next call is 401")
        async with httpx2.AsyncClient(timeout=30, event_hooks={"response": [transcript.on_response]}) as plain:
            revoked = await plain.post(f"{server.base_url}/revoke", data={
                "token": current.refresh_token, "client_id": storage.client_info.client_id})
        assert revoked.status_code == 200, revoked.text
        with anyio.fail_after(30), pytest.raises(Exception):  # the refused client cannot connect
            async with Client(streamable_http_client(server.url, http_client=http), mode=mode) as client:
                await client.call_tool("persmem_whoami", {})
        assert consent.consents == 2  # it was refused with 401 and went back to discovery and consent
    answer = await mcp_post(server, current.access_token)
    assert answer.status_code == 401 and 'error="invalid_token"' in answer.headers["www-authenticate"]
    return [callback.queries[0]["code"], *(t.access_token for t in storage.history),
            *(t.refresh_token for t in storage.history)]


async def mcp_post(server, access_token: str) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=10) as http:
        return await http.post(server.url, json=MCP_INITIALIZE,
                               headers={**MCP_HEADERS, "Authorization": f"Bearer {access_token}"})


def test_connector_connects_as_the_agent_chosen_at_consent(server):
    """The whole flow of the issue, as the MCP SDK's client runs it, for a legacy and a 2026-07-28 client."""
    transcript = Transcript()
    secrets_seen = [PASSPHRASE]

    async def run():
        async with async_chromium_browser() as browser:
            for mode in ("legacy", "2026-07-28"):
                context = await browser.new_context()
                page = await context.new_page()
                transcript.note(f"## MCP SDK client, mode={mode!r}, against {server.url}")
                secrets_seen.extend(await connector_flow(server, page, transcript, mode))
                transcript.note("")
                await context.close()

    ARTIFACTS.mkdir(exist_ok=True)
    try:
        anyio.run(run)
    finally:
        (ARTIFACTS / "oauth_flow.txt").write_text("\n".join(transcript.lines) + "\n")
    text, log = "\n".join(transcript.lines), server.log()
    assert "POST   /token" in text and "POST   /oauth/consent" in text and "POST   /register" in text
    for secret in secrets_seen:
        assert secret not in text and secret not in log


# -- bad inputs that need a consent first (httpx2; the consent form posted as the browser would) ------------------


def pkce() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).decode().rstrip("=")
    return verifier, challenge


SOURCE_ADDRESSES = itertools.count(2)


class Connector:
    """A client registered with /register, driving /authorize, the consent form and /token by hand. Each one
    connects from its own loopback address (127.0.0.N), as separate clients would: the server slows down failed
    authentications per address, and one test's refusals must not slow the next."""

    def __init__(self, server):
        self.server = server
        self.base = server.base_url
        self.address = f"127.0.0.{next(SOURCE_ADDRESSES)}"
        self.http = httpx2.Client(transport=httpx2.HTTPTransport(local_address=self.address), timeout=30)
        self.redirect_uri = f"http://127.0.0.1:{free_port()}/callback"
        registered = self.http.post(f"{self.base}/register", json={
            "client_name": "bad inputs", "redirect_uris": [self.redirect_uri], "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"], "response_types": ["code"]})
        assert registered.status_code == 201, registered.text
        self.client_id = registered.json()["client_id"]
        self.verifier, self.challenge = pkce()

    def open_consent(self) -> str:
        """GET /authorize -> the consent page's request id."""
        self.state = secrets.token_urlsafe(16)
        answer = self.http.get(f"{self.base}/authorize", params={
            "response_type": "code", "client_id": self.client_id, "redirect_uri": self.redirect_uri,
            "code_challenge": self.challenge, "code_challenge_method": "S256", "state": self.state,
            "resource": self.server.url})
        assert answer.status_code == 302, answer.text
        location = urlsplit(answer.headers["location"])
        assert location.path == "/oauth/consent"
        page = self.http.get(f"{self.base}/oauth/consent?{location.query}")
        assert page.status_code == 200 and "no-store" in page.headers["cache-control"]
        return parse_qs(location.query)["request"][0]

    def post_consent(self, request_id: str, origin: str | None = "same", **fields: str) -> httpx2.Response:
        headers = {} if origin is None else {"Origin": self.base if origin == "same" else origin}
        return self.http.post(f"{self.base}/oauth/consent", data={"request": request_id, **fields}, headers=headers)

    def approve(self, agent: str = "kite", secret: str = PASSPHRASE) -> str:
        """A consent approved by the operator -> the code."""
        answer = self.post_consent(self.open_consent(), agent=agent, operator_secret=secret, decision="approve")
        assert answer.status_code == 302, answer.text
        query = self.redirected(answer)
        assert query["state"] == self.state and query["iss"] == self.base
        return query["code"]

    def redirected(self, answer: httpx2.Response) -> dict[str, str]:
        location = answer.headers["location"]
        assert location.startswith(self.redirect_uri + "?"), location
        return {name: values[0] for name, values in parse_qs(urlsplit(location).query).items()}

    def token(self, **form: str) -> httpx2.Response:
        return self.http.post(f"{self.base}/token", data={"client_id": self.client_id, "resource": self.server.url,
                                                          **form})

    def exchange(self, code: str, verifier: str | None = None) -> httpx2.Response:
        return self.token(grant_type="authorization_code", code=code, redirect_uri=self.redirect_uri,
                          code_verifier=verifier or self.verifier)

    def tokens(self, agent: str = "kite") -> dict:
        answer = self.exchange(self.approve(agent))
        assert answer.status_code == 200, answer.text
        return answer.json()

    def initialize(self, access_token: str) -> httpx2.Response:
        """A raw MCP initialize with an OAuth access token (the 401 and its WWW-Authenticate, if refused)."""
        return self.http.post(self.server.url, json=MCP_INITIALIZE,
                              headers={**MCP_HEADERS, "Authorization": f"Bearer {access_token}"})

    def whoami(self, access_token: str) -> str:
        """persmem_whoami's agent with an OAuth access token, over a real MCP session."""
        from mcp import Client
        from mcp.client.streamable_http import streamable_http_client

        async def call():
            transport = httpx2.AsyncHTTPTransport(local_address=self.address)
            async with httpx2.AsyncClient(transport=transport, timeout=30,
                                          headers={"Authorization": f"Bearer {access_token}"}) as http:
                async with Client(streamable_http_client(self.server.url, http_client=http)) as client:
                    return tool_result(await client.call_tool("persmem_whoami", {}))["agent"]

        return anyio.run(call)


def is_invalid_grant(answer: httpx2.Response) -> bool:
    return answer.status_code == 400 and answer.json()["error"] == "invalid_grant"


def test_consent_needs_the_operator_secret_and_issues_nothing_without_it(server):
    connector = Connector(server)
    request_id = connector.open_consent()
    missing = connector.post_consent(request_id, agent="kite", decision="approve")
    assert missing.status_code == 401 and "location" not in missing.headers
    wrong = connector.post_consent(request_id, agent="kite", operator_secret="not the passphrase", decision="approve")
    assert wrong.status_code == 401 and "location" not in wrong.headers
    assert "Nothing was approved" in wrong.text and "not the passphrase" not in wrong.text
    assert f"persmem auth failure from {connector.address}" in server.log()
    # Another page (another site, another local port, a sandboxed frame) cannot post the form, even with the
    # right secret.
    for origin in ("https://evil.example", "http://127.0.0.1:1", "null"):
        forged = connector.post_consent(request_id, origin=origin, agent="kite", operator_secret=PASSPHRASE,
                                        decision="approve")
        assert forged.status_code == 403 and "location" not in forged.headers
    # Five wrong tries end the request: the right secret then finds nothing to approve.
    for _ in range(4):
        assert connector.post_consent(request_id, agent="kite", operator_secret="guess", decision="approve"
                                      ).status_code == 401
    late = connector.post_consent(request_id, agent="kite", operator_secret=PASSPHRASE, decision="approve")
    assert late.status_code == 400 and "location" not in late.headers
    assert PASSPHRASE not in server.log()


def test_one_time_approval_code_approves_once(server):
    printed = cli(server, "oauth", "approve-code")
    assert printed.returncode == 0, printed.stderr
    code = re.search(r"\b[A-Z2-7]{4}(?:-[A-Z2-7]{4})+\b", printed.stdout).group(0)
    connector = Connector(server)
    assert connector.exchange(connector.approve("wren", secret=code)).status_code == 200
    again = connector.post_consent(connector.open_consent(), agent="wren", operator_secret=code, decision="approve")
    assert again.status_code == 401 and "location" not in again.headers


def test_consent_page_escapes_what_the_client_sent(server):
    hostile = '<img src=x onerror=alert(1)>"><script>alert(2)</script>'
    redirect_uri = f"http://127.0.0.1:{free_port()}/cb"
    registered = httpx2.post(f"{server.base_url}/register", json={
        "client_name": hostile, "redirect_uris": [redirect_uri], "token_endpoint_auth_method": "none"}, timeout=10)
    assert registered.status_code == 201
    _, challenge = pkce()
    answer = httpx2.get(f"{server.base_url}/authorize", follow_redirects=True, timeout=10, params={
        "response_type": "code", "client_id": registered.json()["client_id"], "redirect_uri": redirect_uri,
        "code_challenge": challenge, "code_challenge_method": "S256", "state": "s"})
    assert answer.status_code == 200
    assert hostile not in answer.text and "&lt;script&gt;" in answer.text
    assert answer.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    assert "script-src" not in answer.headers["content-security-policy"]  # default-src 'none': no script at all


def test_unknown_consent_request_is_a_clear_400(server):
    answer = httpx2.get(f"{server.base_url}/oauth/consent?request=nope", timeout=10)
    assert answer.status_code == 400 and "Start again" in answer.text


def test_deny_redirects_with_access_denied(server):
    connector = Connector(server)
    answer = connector.post_consent(connector.open_consent(), decision="deny")
    assert answer.status_code == 302
    query = connector.redirected(answer)
    assert query["error"] == "access_denied" and query["state"] == connector.state and "code" not in query


def test_reused_code_is_invalid_grant_and_ends_the_tokens_it_gave(server):
    connector = Connector(server)
    code = connector.approve()
    first = connector.exchange(code)
    assert first.status_code == 200
    tokens = first.json()
    assert connector.initialize(tokens["access_token"]).status_code == 200
    replay = connector.exchange(code)
    assert is_invalid_grant(replay) and "access_token" not in replay.text
    assert connector.initialize(tokens["access_token"]).status_code == 401
    assert is_invalid_grant(connector.token(grant_type="refresh_token", refresh_token=tokens["refresh_token"]))


def test_wrong_pkce_verifier_is_invalid_grant(server):
    connector = Connector(server)
    code = connector.approve()
    wrong, _ = pkce()
    answer = connector.exchange(code, verifier=wrong)
    assert is_invalid_grant(answer) and "access_token" not in answer.text


def test_replayed_refresh_token_is_invalid_grant_and_ends_the_grant(server):
    connector = Connector(server)
    tokens = connector.tokens()
    rotated = connector.token(grant_type="refresh_token", refresh_token=tokens["refresh_token"])
    assert rotated.status_code == 200
    fresh = rotated.json()
    assert fresh["refresh_token"] != tokens["refresh_token"]
    assert connector.whoami(fresh["access_token"]) == "kite"
    replay = connector.token(grant_type="refresh_token", refresh_token=tokens["refresh_token"])
    assert is_invalid_grant(replay) and "access_token" not in replay.text
    # Someone holds a copy: the whole grant ends, the live tokens with it.
    assert connector.initialize(fresh["access_token"]).status_code == 401
    assert is_invalid_grant(connector.token(grant_type="refresh_token", refresh_token=fresh["refresh_token"]))


def test_expired_access_token_is_401_invalid_token(server):
    connector = Connector(server)
    tokens = connector.tokens()
    assert tokens["expires_in"] == ACCESS_SECONDS
    time.sleep(ACCESS_SECONDS + 0.5)
    answer = connector.initialize(tokens["access_token"])
    assert answer.status_code == 401
    challenge = answer.headers["www-authenticate"]
    assert 'error="invalid_token"' in challenge
    assert f'resource_metadata="{server.base_url}/.well-known/oauth-protected-resource/mcp"' in challenge


def test_agent_revoke_ends_its_oauth_access_at_once(server):
    """Runs as wren so the module's other tests keep kite; revoking wren ends every grant approved as wren."""
    connector = Connector(server)
    tokens = connector.tokens(agent="wren")
    assert connector.whoami(tokens["access_token"]) == "wren"
    revoked = cli(server, "agent", "revoke", "wren")
    assert revoked.returncode == 0, revoked.stderr
    assert connector.initialize(tokens["access_token"]).status_code == 401
    assert is_invalid_grant(connector.token(grant_type="refresh_token", refresh_token=tokens["refresh_token"]))


def test_consent_page_says_what_to_run_when_nobody_can_approve(persmem_server):
    """A fresh server: no operator credential yet. The page names the command instead of offering Approve."""
    fresh = persmem_server(agents=["kite"], env={"PERSMEM_DISABLE_PLUGINS": DISABLED})
    connector = Connector(fresh)
    page = connector.http.get(f"{fresh.base_url}/oauth/consent", params={"request": connector.open_consent()})
    assert "persmem oauth password" in page.text and "persmem oauth approve-code" in page.text
    assert 'value="approve"' not in page.text and 'value="deny"' in page.text
    refused = connector.post_consent(parse_qs(urlsplit(str(page.url)).query)["request"][0], agent="kite",
                                     operator_secret="anything at all", decision="approve")
    assert refused.status_code == 401 and "location" not in refused.headers
