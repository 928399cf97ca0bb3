"""The consent page: where the operator approves a client as one agent, or denies it.

`/authorize` (the SDK's handler, provider.authorize) checks the client, the redirect URI and PKCE, keeps the
request as a PendingConsent and sends the browser here with `?request=<id>`. The page says who asks (the
client's name and id), where the browser will be sent back (the redirect URI's origin, in bold: that is where
the code goes), and asks for the name of the agent the client will act as. Approving needs the operator's
passphrase (`persmem oauth password`) or a one-time approval code (`persmem oauth approve-code`): anyone can
open an authorization URL, only the operator can turn it into a code.

Registration is open, so anyone can reach this page: it names no agent (the operator types the name), and an
agent name that does not exist is answered exactly like a wrong secret, so the page cannot be used to learn
which agents exist. A wrong operator secret is a failed authentication like any other (host.auth_failures:
the fail2ban log line and the growing delay); the delay is waited BEFORE the secret is checked and one
address has one check running at a time, so guesses sent in parallel are held back like ones sent in turn;
past GLOBAL_FAILURES failed checks in GLOBAL_WINDOW seconds (guessers spread over many addresses) every check
waits the longest delay first. After MAX_FAILURES on one request the request is dropped. The POST must come from the page itself (Origin/Sec-Fetch-Site), the pages are never
cached or framed, and the form may post only to this server and be redirected only to the client's redirect
URI (CSP form-action). Nothing a client sent is written into the page unescaped.
"""

from __future__ import annotations

import base64
import collections
import hashlib
import html
import logging
import time
from urllib.parse import parse_qs, urlsplit

import anyio
import anyio.to_thread
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route

from persmem_core.auth.middleware import client_address
from persmem_core.errors import UserError
from persmem_core.auth.oauth.client_documents import LOOPBACK_REDIRECT_HOSTS
from persmem_core.auth.oauth.provider import CONSENT_PATH  # where provider.authorize sends the browser
from persmem_core.auth.oauth.operator_credential import check_time_spent

log = logging.getLogger("persmem.oauth")

MAX_FAILURES = 5  # wrong operator secrets on one request before it is dropped
MAX_FORM_BYTES = 16 * 1024  # the form has four short fields
MAX_SECRET_CHARS = 1024
MAX_CHECKS_AT_ONCE = 4  # operator checks running server-wide (each is ~30 ms of scrypt and 16 MB)
GLOBAL_FAILURES = 10  # failed operator checks within GLOBAL_WINDOW, from anywhere, before every check waits
GLOBAL_WINDOW = 600.0

STYLE = """
body{font:16px/1.5 system-ui,sans-serif;max-width:34rem;margin:2rem auto;padding:0 1rem;color:#1d1d1f}
h1{font-size:1.4rem;margin-bottom:.5rem}
.card{border:1px solid #d0d0d5;border-radius:8px;padding:1rem 1.2rem;margin:1rem 0}
.muted{color:#5a5a60;font-size:.9rem;word-break:break-all}
.error{background:#fde8e8;border:1px solid #e0a0a0;border-radius:6px;padding:.6rem .8rem}
.notice{background:#fff6dc;border:1px solid #e0c870;border-radius:6px;padding:.6rem .8rem}
label{display:block;margin:.8rem 0 .2rem;font-weight:600}
select,input{font:inherit;width:100%;box-sizing:border-box;padding:.4rem}
.buttons{display:flex;gap:.8rem;margin-top:1.2rem}
button{font:inherit;padding:.5rem 1.2rem;border-radius:6px;border:1px solid #888;background:#fff;cursor:pointer}
button.approve{background:#1f6feb;border-color:#1f6feb;color:#fff}
code{background:#f0f0f3;padding:0 .2rem;border-radius:3px}
"""
# The page's only style is this block; the CSP names its hash, so no other style (and no script) runs.
STYLE_HASH = base64.b64encode(hashlib.sha256(STYLE.encode()).digest()).decode()


def origin_of(url: str) -> str:
    """`scheme://host[:port]` of `url` (how the page names where the browser goes, and the CSP source)."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def client_label(client_id: str) -> str:
    """How the page names a client id. A client ID metadata document is named by its whole URL, not its host:
    on a shared host (raw.githubusercontent.com/someone/...) the host alone would vouch for anyone's document."""
    return client_id


def page_headers(redirect_uri: str | None) -> dict[str, str]:
    """No caching, no framing, no script; the form may post here and be redirected only to the client.
    Referrer-Policy same-origin (not the server's default no-referrer) so the browser sends the page's real
    Origin with the POST, which the same-origin check needs; it still sends nothing to other sites."""
    form_action = "'self'" + (f" {origin_of(redirect_uri)}" if redirect_uri else "")
    return {
        "Cache-Control": "no-store",
        "X-Frame-Options": "DENY",
        "Referrer-Policy": "same-origin",
        "Content-Security-Policy": f"default-src 'none'; style-src 'sha256-{STYLE_HASH}'; "
        f"form-action {form_action}; frame-ancestors 'none'; base-uri 'none'",
    }


def message_page(status: int, title: str, text: str) -> HTMLResponse:
    """A page with no form: the request is unknown, expired, dropped, or the POST came from elsewhere."""
    body = f"<h1>{html.escape(title)}</h1><p>{html.escape(text)}</p>"
    return HTMLResponse(document(title, body), status_code=status, headers=page_headers(None))


def document(title: str, body: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width,initial-scale=1">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>{body}</body></html>")


class ConsentPage:
    """GET and POST /oauth/consent over the provider's pending consents."""

    def __init__(self, host, provider):
        self.host = host
        self.provider = provider
        self.checking: set[str] = set()  # addresses with an operator check running
        self.recent_failures: collections.deque[float] = collections.deque()  # monotonic times, GLOBAL_WINDOW

    # -- GET: the page ---------------------------------------------------------------------------------------

    async def show(self, request: Request) -> Response:
        pending = self.provider.pending_consent(request.query_params.get("request", ""))
        if pending is None:
            return self.unknown_request()
        return self.form(pending)

    def unknown_request(self) -> HTMLResponse:
        return message_page(400, "This sign-in request is no longer valid",
                            "It is unknown, expired or already answered. Start again from the app that sent you "
                            "here (for example, connect the connector again).")

    def form(self, pending, *, status: int = 200, error: str | None = None, agent: str | None = None) -> HTMLResponse:
        esc = html.escape
        name = pending.client_name or client_label(pending.client_id)
        title = f"Allow {name} to use persmem?"
        agents = self.host.agents.names()
        operator_ready = self.host.oauth.has_operator_credential()
        back_to = origin_of(pending.redirect_uri)
        loopback = urlsplit(pending.redirect_uri).hostname in LOOPBACK_REDIRECT_HOSTS

        parts = [f"<h1>{esc(title)}</h1>"]
        if error:
            parts.append(f'<p class="error" role="alert">{esc(error)}</p>')
        parts.append('<div class="card">')
        parts.append(f"<p><b>{esc(name)}</b> asks to read and write memories, mail and the other tools of this "
                     f"persmem server, acting as the agent you choose below.</p>")
        parts.append(f'<p class="muted">Client id: {esc(client_label(pending.client_id))}')
        if pending.client_uri:
            parts.append(f"<br>Its home page (as the client states it): {esc(pending.client_uri)}")
        parts.append("</p>")
        parts.append(f"<p>If you approve, you will be sent back to <b>{esc(back_to)}</b>"
                     + (" (a program on this computer)" if loopback else "") + ".</p>")
        parts.append(f'<p class="muted">Full return address: {esc(pending.redirect_uri)}</p>')
        parts.append("<p>Approve only if you have just asked this app to connect to persmem yourself.</p></div>")

        notices = []
        if not agents:
            notices.append("There is no agent to act as yet. Create one with <code>persmem agent add NAME</code>, "
                           "then reload this page.")
        if not operator_ready:
            notices.append("No operator credential is set, so nobody can approve. Set a passphrase with "
                           "<code>persmem oauth password</code>, or print a one-time code with "
                           "<code>persmem oauth approve-code</code>, then reload this page.")
        parts += [f'<p class="notice">{n}</p>' for n in notices]

        can_approve = bool(agents) and operator_ready
        parts.append(f'<form method="post" action="{CONSENT_PATH}">')
        parts.append(f'<input type="hidden" name="request" value="{esc(pending.request_id)}">')
        if can_approve:
            parts.append('<label for="agent">Act as agent</label>'
                         f'<input id="agent" name="agent" value="{esc(agent or "")}" autocomplete="off" '
                         'spellcheck="false" required pattern="[a-z][a-z0-9_-]{0,31}">'
                         '<p class="muted">The agent\'s name, as <code>persmem agent list</code> shows it (this page '
                         'lists none: anyone can open it). Every call this client makes will be that agent\'s, '
                         'as with its own token, until you revoke it (<code>persmem oauth revoke</code>).</p>'
                         '<label for="operator_secret">Operator passphrase or one-time approval code '
                         '(<code>persmem oauth approve-code</code>)</label>'
                         '<input id="operator_secret" name="operator_secret" type="password" '
                         'autocomplete="current-password" required autofocus>')
        parts.append('<div class="buttons">')
        if can_approve:
            parts.append('<button class="approve" type="submit" name="decision" value="approve">Approve</button>')
        parts.append('<button type="submit" name="decision" value="deny" formnovalidate>Deny</button></div></form>')
        return HTMLResponse(document(title, "".join(parts)), status_code=status,
                            headers=page_headers(pending.redirect_uri))

    # -- POST: the decision ----------------------------------------------------------------------------------

    async def decide(self, request: Request) -> Response:
        if not self.same_origin(request):
            return message_page(403, "Refused", "This form can only be sent from persmem's own consent page.")
        form = await self.read_form(request)
        if form is None:
            return message_page(400, "Bad request", "The consent form could not be read; start again from the app.")
        pending = self.provider.pending_consent(form.get("request", ""))
        if pending is None:
            return self.unknown_request()
        decision = form.get("decision")
        if decision == "deny":
            return self.redirect(pending.request_id, agent=None)
        if decision != "approve":
            return self.form(pending, status=400, error="Choose Approve or Deny.")

        agent = form.get("agent", "")
        secret = form.get("operator_secret", "")
        if not secret:
            return self.form(pending, status=401, agent=agent,
                             error="Enter the operator passphrase or a one-time approval code.")
        address = client_address(request.scope)
        if address in self.checking or len(self.checking) >= MAX_CHECKS_AT_ONCE:
            if address in self.checking:  # a second guess before the first was answered: counted like a wrong one
                self.host.auth_failures.failed(address)
            return message_page(429, "One moment",
                                "Another approval is being checked. Go back, wait a few seconds and press Approve "
                                "again.")
        self.checking.add(address)
        try:
            await anyio.sleep(self.wait_before_check(address))
            # An agent that does not exist is refused exactly like a wrong secret, and without checking the secret
            # (a one-time approval code is spent by a successful check): the form tells nobody which agents exist.
            check = self.host.oauth.check_operator if agent in self.host.agents.names() else check_time_spent
            try:
                approved = len(secret) <= MAX_SECRET_CHARS and bool(await anyio.to_thread.run_sync(check, secret))
            except UserError as e:  # the stored credential is damaged: the server's log says where, the page not
                log.error("consent: %s", e)
                return message_page(503, "The operator credential cannot be checked",
                                    "The server's operator credential is damaged. Set it again with "
                                    "`persmem oauth password`, then start again from the app.")
            if not approved:
                return await self.wrong_secret(address, pending, agent)
        finally:
            self.checking.discard(address)
        return self.redirect(pending.request_id, agent=agent)

    def wait_before_check(self, address: str) -> float:
        """The address's failure delay, or the longest one while guesses come from many addresses at once."""
        now = time.monotonic()
        while self.recent_failures and now - self.recent_failures[0] > GLOBAL_WINDOW:
            self.recent_failures.popleft()
        if len(self.recent_failures) >= GLOBAL_FAILURES:
            return self.host.auth_failures.MAX_DELAY
        return self.host.auth_failures.delay(address)

    async def wrong_secret(self, address: str, pending, agent: str) -> Response:
        """A failed operator authentication: logged and delayed like every other, and counted on the request."""
        self.recent_failures.append(time.monotonic())
        await anyio.sleep(self.host.auth_failures.failed(address))
        pending.failures += 1
        if pending.failures >= MAX_FAILURES:
            self.provider.pending.pop(pending.request_id, None)
            return message_page(401, "Too many wrong tries",
                                "This sign-in request has ended. Start again from the app that sent you here.")
        return self.form(pending, status=401, agent=agent,
                         error="That is not the operator passphrase or a valid approval code, or there is no agent "
                               "by that name. Nothing was approved.")

    def redirect(self, request_id: str, *, agent: str | None) -> Response:
        try:
            url = self.provider.finish_consent(request_id, agent=agent)
        except UserError as e:  # expired meanwhile, or the agent was revoked between the page and the click
            return message_page(400, "Not approved", str(e))
        return RedirectResponse(url, status_code=302)

    def same_origin(self, request: Request) -> bool:
        """The POST comes from this server's own page: a browser says so with Origin (and Sec-Fetch-Site);
        a request without them is not a browser another site could drive, and still needs the secret."""
        origin = request.headers.get("origin")
        if origin is not None and origin != origin_of(self.provider.issuer):
            return False
        return request.headers.get("sec-fetch-site", "same-origin") == "same-origin"

    async def read_form(self, request: Request) -> dict[str, str] | None:
        """The urlencoded form, at most MAX_FORM_BYTES; None if it is something else."""
        if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
            return None
        body = b""
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM_BYTES:
                return None
        try:
            fields = parse_qs(body.decode(), keep_blank_values=True, max_num_fields=20)
        except (UnicodeDecodeError, ValueError):
            return None
        return {name: values[0] for name, values in fields.items()}


def consent_routes(host, provider) -> list[Route]:
    """GET /oauth/consent (the page) and POST /oauth/consent (the decision), for routes.build_oauth_routes."""
    page = ConsentPage(host, provider)
    return [Route(CONSENT_PATH, endpoint=page.show, methods=["GET"]),
            Route(CONSENT_PATH, endpoint=page.decide, methods=["POST"])]
