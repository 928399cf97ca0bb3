"""Attacks on the dashboard's sessions and event streams, through a real `persmem serve`, real HTTP (httpx2) and a
real Chromium. Grouped by attack class: session fixation, filling the session store, a revoked agent (or an ended
login) that keeps its session or its live feed, and error answers without the security headers."""

import os
import subprocess
import threading
import time
from pathlib import Path

import httpx2
import pytest
from playwright.sync_api import expect

from dashfixtures import csrf_of, http_login, login, tool
from persmem_core.sdk import AgentStore
from persmem_core.sdk.testing import clean_env, persmem_command, start_server, write_config
from persmem_dashboard.app import SECURITY_HEADERS

SESSION_COOKIE = "persmem_session"
PLANTED_ID = "f1" * 32  # what an attacker would plant in the victim's browser before the victim logs in
# Agents revoked by the tests below (one each, so the tests stay independent); every one reads all the mail.
REVOKED_IN_TESTS = ("leaver", "idler", "dropped", "readded", "reborn", "viewer")
FAST = "memory_hnsw,shell,git,searxng"  # the dashboard and mail are all these tests need
HERE = Path(__file__).parent


def start(tmp_path_factory, dashboard: dict):
    home = tmp_path_factory.mktemp("dashsessions")
    write_config(home, {"amq": {"readers": {name: ["*"] for name in REVOKED_IN_TESTS}}, "dashboard": dashboard})
    env = clean_env(home, PERSMEM_DISABLE_PLUGINS=FAST, PERSMEM_PLUGIN_MODULES="panel_plugin_for_tests",
                    PYTHONPATH=os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]))
    return start_server(home, ("kite", "wren", "rotated", *REVOKED_IN_TESTS), env)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    running = start(tmp_path_factory, {})
    yield running
    running.stop()


@pytest.fixture(scope="module")
def short_server(tmp_path_factory):
    """Logins that last 2 seconds, to see expired sessions swept."""
    running = start(tmp_path_factory, {"session_hours": 2 / 3600})
    yield running
    running.stop()


def base_of(server) -> str:
    return server.base_url + "/dashboard"


def session_files(server) -> set[str]:
    folder = server.home / "dashboard" / "sessions"
    return {p.name for p in folder.iterdir()} if folder.exists() else set()


def client(**kwargs) -> httpx2.Client:
    return httpx2.Client(timeout=10, follow_redirects=False, **kwargs)


def with_session(session_id: str) -> httpx2.Client:
    browser = client()
    browser.cookies.set(SESSION_COOKIE, session_id, domain="127.0.0.1", path="/dashboard")
    return browser


def send_mail(server, subject: str) -> None:
    tool(server, "amq_send", {"to_agent": "kite", "subject": subject, "body": f"{subject}, body"},
         agent="wren")


# -- session fixation ---------------------------------------------------------------------------------------------


def test_a_session_id_planted_before_login_never_becomes_the_login(server):
    base = base_of(server)
    with with_session(PLANTED_ID) as victim:
        assert http_login(victim, server, "kite").status_code in (302, 303)
        issued = victim.cookies.get(SESSION_COOKIE)
        assert issued and issued != PLANTED_ID
        assert victim.get(base + "/mail").status_code == 200
    with with_session(PLANTED_ID) as attacker:
        refused = attacker.get(base + "/mail")
        assert refused.status_code == 303 and refused.headers["location"] == "/dashboard/login"
        assert attacker.get(base + "/mail/events").status_code == 401


def test_no_session_id_is_handed_out_before_login(server):
    """The id a server hands an anonymous visitor is the other way to fix one: there must be none."""
    base = base_of(server)
    with client() as visitor:
        for path in ("/login", "/", "/mail", "/static/dashboard.css"):
            answer = visitor.get(base + path)
            assert SESSION_COOKIE not in answer.headers.get("set-cookie", ""), path
        assert SESSION_COOKIE not in visitor.cookies


def test_logging_in_again_issues_another_id_and_ends_the_first(server):
    base = base_of(server)
    with client() as browser:
        http_login(browser, server, "kite")
        first = browser.cookies.get(SESSION_COOKIE)
        http_login(browser, server, "wren")
        second = browser.cookies.get(SESSION_COOKIE)
        assert second != first and "wren" in browser.get(base + "/mail").text
    with with_session(first) as replay:
        assert replay.get(base + "/mail").status_code == 303


def test_chromium_replaces_a_planted_session_cookie_at_login(page, server):
    base = base_of(server)
    page.context.add_cookies([{"name": SESSION_COOKIE, "value": PLANTED_ID, "domain": "127.0.0.1",
                               "path": "/dashboard", "httpOnly": True, "sameSite": "Strict"}])
    login(page, server, "kite", landing="mail")
    sessions = [c for c in page.context.cookies(base + "/") if c["name"] == SESSION_COOKIE]
    assert len(sessions) == 1 and sessions[0]["value"] != PLANTED_ID
    assert sessions[0]["httpOnly"] and sessions[0]["sameSite"] == "Strict"
    with with_session(PLANTED_ID) as attacker:
        assert attacker.get(base + "/mail").status_code == 303


# -- filling the session store ------------------------------------------------------------------------------------


def test_a_flood_of_anonymous_requests_stores_no_session(short_server):
    base = base_of(short_server)
    before = session_files(short_server)
    with client() as visitor:
        for n in range(40):
            visitor.cookies.clear()  # every request a new visitor, as a flood would be
            if n % 2:
                visitor.cookies.set(SESSION_COOKIE, f"{n:064x}", domain="127.0.0.1", path="/dashboard")
            visitor.get(base + ("/login", "/", "/mail", "/mail/events", "/static/dashboard.css", "/nope")[n % 6])
        for _ in range(3):  # wrong tokens (each answered after half a second)
            visitor.cookies.clear()
            form = visitor.get(base + "/login")
            refused = visitor.post(base + "/login", data={"token": "pm_wrong", "_csrf_token": csrf_of(form.text)})
            assert refused.status_code == 401
    assert session_files(short_server) == before == set()


def test_logging_out_deletes_the_stored_session(server):
    base = base_of(server)
    before = session_files(server)
    with client() as browser:
        http_login(browser, server, "kite")
        session_id = browser.cookies.get(SESSION_COOKIE)
        assert len(session_files(server) - before) == 1
        page = browser.get(base + "/mail")
        assert browser.post(base + "/logout", data={"_csrf_token": csrf_of(page.text)}).status_code in (302, 303)
        assert SESSION_COOKIE not in browser.cookies
    assert session_files(server) - before == set()
    with with_session(session_id) as replay:
        assert replay.get(base + "/mail").status_code == 303


def test_expired_sessions_are_swept(short_server):
    base = base_of(short_server)
    with client() as browser:
        http_login(browser, short_server, "kite")
        session_id = browser.cookies.get(SESSION_COOKIE)
    assert len(session_files(short_server)) == 1
    time.sleep(3.2)  # the login lasts 2 s; sweeps run at most every 2 s here
    with client() as visitor:
        visitor.get(base + "/login")  # anyone's request may run the sweep; nobody touches the expired id
    assert session_files(short_server) == set()
    with with_session(session_id) as replay:
        assert replay.get(base + "/mail").status_code == 303


# -- a revoked agent, or an ended login, keeps its session or its live feed -----------------------------------------


class EventReader(threading.Thread):
    """Reads one dashboard event stream in the background, noting when it ends."""

    def __init__(self, server, agent, panel="mail"):
        super().__init__(daemon=True)
        self.client = client()
        assert http_login(self.client, server, agent).status_code in (302, 303)
        self.url = f"{base_of(server)}/{panel}/events"
        self.lines: list[str] = []
        self.opened, self.ended = threading.Event(), threading.Event()
        self.ended_at = None

    def run(self):
        try:
            with self.client.stream("GET", self.url, timeout=httpx2.Timeout(10, read=6)) as answer:
                if answer.status_code != 200:
                    self.lines.append(f"! status {answer.status_code}")
                    return
                for line in answer.iter_lines():
                    self.lines.append(line)
                    self.opened.set()
        except httpx2.HTTPError as exc:
            self.lines.append(f"! {type(exc).__name__}")
        finally:
            self.ended_at = time.monotonic()
            self.ended.set()
            self.client.close()

    def saw(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def wait_for(self, text: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and not self.saw(text):
            time.sleep(0.05)
        return self.saw(text)


def test_revoking_an_agent_ends_its_idle_stream_within_a_second(server):
    """The weather panel's stream sends one event and then nothing, ever: only a watcher can end it."""
    files_before = session_files(server)
    reader = EventReader(server, "idler", panel="weather")
    its_session = session_files(server) - files_before
    reader.start()
    assert reader.opened.wait(10) and reader.wait_for("event: forecast", 5)
    subprocess.run(persmem_command("agent", "revoke", "idler"), env=server.env, check=True, capture_output=True)
    revoked_at = time.monotonic()
    assert reader.ended.wait(1.5), "the stream of a revoked agent is still open"
    assert reader.ended_at - revoked_at < 1.5 and not reader.saw("! ")  # ended cleanly, not cut off mid-response
    assert len(its_session) == 1 and not its_session & session_files(server)  # its session went with it


def test_mail_sent_after_the_revocation_never_reaches_the_mail_stream(server):
    reader = EventReader(server, "leaver")
    reader.start()
    assert reader.opened.wait(10)
    send_mail(server, "before the revocation")
    assert reader.wait_for("before the revocation, body", 5), "the stream does not carry mail at all"
    AgentStore(server.home).revoke("leaver")
    revoked_at = time.monotonic()
    send_mail(server, "after the revocation")
    assert reader.ended.wait(max(0.0, revoked_at + 1.5 - time.monotonic())), "the stream of a revoked agent is open"
    time.sleep(0.5)
    assert not reader.saw("after the revocation")


def test_logging_out_in_another_tab_ends_the_sessions_open_stream(server):
    reader = EventReader(server, "kite", panel="weather")
    reader.start()
    assert reader.opened.wait(10)
    other_tab = reader.client.get(base_of(server) + "/mail")  # the same browser, so the same session
    reader.client.post(base_of(server) + "/logout", data={"_csrf_token": csrf_of(other_tab.text)})
    logged_out_at = time.monotonic()
    assert reader.ended.wait(1.5), "the stream of a logged-out session is still open"
    assert reader.ended_at - logged_out_at < 1.5


def test_a_stream_ends_when_its_login_expires(short_server):
    reader = EventReader(short_server, "kite", panel="weather")
    logged_in_at = time.monotonic()
    reader.start()
    assert reader.opened.wait(10)
    assert reader.ended.wait(4), "the stream outlived its 2 s login"
    assert reader.ended_at - logged_in_at < 4


def test_a_revoked_agents_session_is_refused_for_pages_scripts_and_streams(server):
    base = base_of(server)
    with client() as browser:
        http_login(browser, server, "dropped")
        assert browser.get(base + "/mail").status_code == 200
        assert browser.get(base + "/mail/panel.js").status_code == 200
        AgentStore(server.home).revoke("dropped")
        assert browser.get(base + "/mail/panel.js").status_code == 401
        assert browser.get(base + "/mail/events").status_code == 401
        assert browser.get(base + "/mail").headers["location"] == "/dashboard/login"


def test_adding_a_revoked_agent_again_does_not_revive_its_old_session(server):
    base = base_of(server)
    store = AgentStore(server.home)
    with client() as browser:
        http_login(browser, server, "readded")
        session_id = browser.cookies.get(SESSION_COOKIE)
        store.revoke("readded")
        assert browser.get(base + "/mail").status_code == 303  # seen revoked: the session is deleted
    store.add("readded")
    with with_session(session_id) as replay:
        assert replay.get(base + "/mail").status_code == 303


def test_a_session_untouched_while_its_agent_was_revoked_and_added_again_stays_dead(server):
    """No page saw the revocation (so nothing deleted the session): the re-added name is a new agent."""
    base = base_of(server)
    store = AgentStore(server.home)
    with client() as browser:
        http_login(browser, server, "reborn")
        store.revoke("reborn")
        store.add("reborn")
        assert browser.get(base + "/mail").status_code == 303


def test_rotating_a_token_ends_the_dashboard_logins_made_with_it(server):
    """Rotation is the answer to a leaked token: whoever logged in with the old one is logged out too."""
    with client() as browser:
        http_login(browser, server, "rotated")
        assert browser.get(base_of(server) + "/mail").status_code == 200
        AgentStore(server.home).add("rotated", replace=True)
        assert browser.get(base_of(server) + "/mail").status_code == 303


def test_failed_dashboard_logins_are_logged_for_fail2ban_and_slowed(server):
    with client() as browser:
        form = browser.get(base_of(server) + "/login")
        timings = []
        for _ in range(4):
            started = time.monotonic()
            refused = browser.post(base_of(server) + "/login", data={"token": "pm_wrong",
                                                                   "_csrf_token": csrf_of(form.text)})
            timings.append(time.monotonic() - started)
            assert refused.status_code == 401
    assert timings[-1] > timings[0] + 0.3  # the delay grows with the failures from this address
    assert server.log().count("persmem auth failure from 127.0.0.1") >= 4


def test_chromium_live_feed_stops_when_its_agent_is_revoked(page, server):
    base = login(page, server, "viewer", landing="mail")
    state = page.locator("#live-state")
    expect(state).to_have_text("Live: connected.")
    AgentStore(server.home).revoke("viewer")
    expect(state).to_have_text("Live: reconnecting…", timeout=1500)
    send_mail(server, "sent after viewer was revoked")
    page.wait_for_timeout(1500)
    expect(page.locator("details.message[data-live]")).to_have_count(0)
    page.goto(base + "/mail")
    expect(page).to_have_url(base + "/login")


# -- error answers without the security headers -------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "status"), [
    ("GET", "/no-such-panel", 404), ("GET", "/no/such/route", 404), ("GET", "/static/missing.css", 404),
    ("GET", "/mail/events", 401), ("GET", "/mail/panel.js", 401), ("POST", "/logout", 403), ("PUT", "/login", 405),
    ("GET", "/mail", 303), ("GET", "/login", 200),
])
def test_every_answer_carries_the_security_headers(server, method, path, status):
    with client() as anyone:
        answer = anyone.request(method, base_of(server) + path)
    assert answer.status_code == status
    for name, value in SECURITY_HEADERS.items():  # the dashboard's own (the core's defaults forbid its pages)
        assert answer.headers[name] == value, name

