"""The dashboard's Sessions panel in a real Chromium against a real server: kite's sessions (imported with
`persmem sessions import`, indexed by the memory plugin) listed, one read turn by turn, searched; markup in a
transcript shown as text; and another agent sees none of kite's sessions, not even by naming one in the URL."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx2
import pytest
from playwright.sync_api import expect

from persmem_core.sdk.testing import browser_page, chromium_browser, clean_env, dashboard_login as login, start_server

sys.path.insert(0, str(Path(__file__).parent))
from sessions_testkit import session_metas  # noqa: E402
from test_import_backfill import claude_transcript, codex_rollout, plugin_env  # noqa: E402

PERSMEM = Path(sys.executable).parent / "persmem"
ARTIFACTS = Path(__file__).parents[3] / "test-artifacts" / "sessions"
LONG_OUTPUT = "\n".join(f"tests/test_tile_{i}.py::test_render PASSED" for i in range(400))
XSS = "<script>alert('transcript xss')</script><img src=x onerror=alert(2)>"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("panel")
    home = root / "home"
    env = clean_env(home, PERSMEM_DISABLE_PLUGINS="shell,git,searxng", **plugin_env())
    running = start_server(home, ("kite", "wren", "ibis"), env)
    projects = root / "me" / ".claude" / "projects"
    heron = claude_transcript(projects, "/home/me/src/heron", "Where do the heron thumbnails go?",
                              "Thumbnails go to the cold-storage bucket **heron-thumbs** with a 30 day lifecycle.")
    with heron.open("a") as transcript:  # a long tool output later in the session, and markup an assistant quoted
        tool = "toolu_01LongOutput"
        transcript.write(json.dumps({"type": "assistant", "sessionId": heron.stem, "cwd": "/home/me/src/heron",
                                     "timestamp": "2025-10-12T09:20:00.000Z", "uuid": "a2", "message": {
                                         "role": "assistant", "content": [
                                             {"type": "text", "text": f"The page printed {XSS}"},
                                             {"type": "tool_use", "id": tool, "name": "Bash",
                                              "input": {"command": "pytest -v tests/"}}]}}) + "\n")
        transcript.write(json.dumps({"type": "user", "sessionId": heron.stem, "cwd": "/home/me/src/heron",
                                     "timestamp": "2025-10-12T09:20:30.000Z", "uuid": "u3", "message": {
                                         "role": "user", "content": [{"type": "tool_result", "tool_use_id": tool,
                                                                      "content": LONG_OUTPUT}]}}) + "\n")
    codex_rollout(root / "me" / ".codex", "/home/me/src/atlas", "Why are the atlas tiles blurry?",
                  "The tiles are rendered at half resolution by the zoom-12 preset.")
    done = subprocess.run([str(PERSMEM), "sessions", "import", "--agent", "kite", "--claude", str(projects),
                           "--codex", str(root / "me" / ".codex")], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    running.heron = heron.stem
    wait_indexed(running)
    yield running
    running.stop()


def wait_indexed(server, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        metas = session_metas(server.home, "kite")
        if metas and all(m["indexed_lines"] == m["lines"] for m in metas):
            return
        time.sleep(0.2)
    raise AssertionError("the imported sessions were not indexed in time")


@pytest.fixture(scope="module")
def browser():
    with chromium_browser(ARTIFACTS) as chromium:
        yield chromium


@pytest.fixture
def page(browser):
    with browser_page(browser) as page:
        yield page



def shot(page, name: str) -> None:
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_list_shows_the_agents_sessions_with_project_client_and_turns(page, server):
    base = login(page, server, "kite")
    page.click("nav >> text=Sessions")
    expect(page).to_have_url(base + "/sessions")
    rows = page.locator("#session-list tbody tr")
    expect(rows).to_have_count(2)
    heron = page.locator(f'#session-list tr[data-session="{server.heron}"]')
    expect(heron).to_contain_text("Where do the heron thumbnails go?")
    expect(heron.locator("td").nth(1)).to_have_text("heron")
    expect(heron.locator("td").nth(2)).to_have_text("claude")
    # prompt; answer, its tool call, the result; later: an answer, its tool call, the (long) result
    expect(heron.locator("td").nth(4)).to_have_text("7")
    expect(page.locator("#session-list")).to_contain_text("codex")
    shot(page, "sessions-list")


def test_read_a_transcript_role_labelled_with_long_tool_output_collapsed(page, server):
    base = login(page, server, "kite")
    page.goto(base + "/sessions")
    page.click(f'#session-list tr[data-session="{server.heron}"] a')
    expect(page.locator("#session-facts")).to_contain_text("heron · claude · /home/me/src/heron")
    turns = page.locator("#turns details.turn")
    expect(turns.first.locator(".badge.role")).to_have_text("user")
    expect(turns.first.locator(".body")).to_have_text("Where do the heron thumbnails go?")
    expect(turns.nth(1).locator(".badge.role")).to_have_text("assistant")
    expect(turns.nth(1).locator(".body strong")).to_have_text("heron-thumbs")  # Markdown, rendered
    long_output = page.locator("#turns details.turn.role-tool", has_text="test_tile_1.py")  # cut at 2,000
    expect(long_output).to_have_count(1)
    assert long_output.get_attribute("open") is None  # collapsed until clicked
    expect(long_output.locator("pre.body")).not_to_be_visible()
    long_output.locator("summary").click()
    expect(long_output.locator("pre.body")).to_be_visible()
    shot(page, "sessions-read")


def test_markup_in_a_transcript_is_shown_as_text(page, server):
    base = login(page, server, "kite")
    page.goto(f"{base}/sessions?session={server.heron}")
    expect(page.locator("#turns")).to_contain_text("<script>alert('transcript xss')</script>")
    # the panel's own script (served from the dashboard, the CSP allows no other) is the only one
    assert page.locator('main script:not([src$="/sessions/panel.js"])').count() == 0
    assert page.locator("main img").count() == 0
    assert page.dialogs == []


def test_search_finds_the_turn_and_links_to_its_session(page, server):
    base = login(page, server, "kite")
    page.goto(base + "/sessions")
    page.fill("input[name=q]", "which bucket holds the heron thumbnails")
    page.click("form.filters button")
    expect(page.locator("#hits")).to_contain_text("heron-thumbs")  # the answer is among the best turns
    long_output = page.locator("#hits details.hit.role-tool", has_text="test_tile_1.py")
    if long_output.count():  # a tool's output found is collapsed like in the transcript
        assert long_output.first.get_attribute("open") is None
    first = page.locator("#hits details.hit").first
    expect(first).to_contain_text("heron")
    shot(page, "sessions-search")
    first.locator("a.session-link").click()
    expect(page.locator("#session-facts")).to_contain_text(server.heron)


def test_another_agent_sees_none_of_kites_sessions(page, server):
    base = login(page, server, "wren")
    page.goto(base + "/sessions")
    expect(page.locator("#caption")).to_contain_text("No sessions yet")
    expect(page.locator("#session-list tbody tr")).to_have_count(0)
    page.goto(f"{base}/sessions?q=heron+thumbnails+bucket")
    expect(page.locator("#hits details.hit")).to_have_count(0)
    page.goto(f"{base}/sessions?session={server.heron}&client=claude")
    expect(page.locator(".error")).to_contain_text("you have no session")
    assert "heron-thumbs" not in page.content() and "Where do the heron" not in page.content()
    shot(page, "sessions-other-agent")


def test_phone_width(browser, server):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    try:
        base = login(page, server, "kite")
        for query in ("", f"?session={server.heron}", "?q=heron+thumbnails"):
            page.goto(f"{base}/sessions{query}")
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), query
        shot(page, "sessions-phone")
    finally:
        context.close()


def test_the_indexing_progress_bar_is_full_when_every_turn_is_searchable(page, server):
    base = login(page, server, "kite")
    page.goto(base + "/sessions")
    turns = sum(meta["turns"] for meta in session_metas(server.home, "kite"))  # both imported sessions'
    expect(page.locator("#indexing-text")).to_have_text(f"All {turns} turns are indexed for search.")
    bar = page.locator("#indexing-bar")
    assert bar.get_attribute("value") == bar.get_attribute("max") == str(turns)


def test_the_indexing_progress_bar_moves_live_while_a_big_session_is_indexed(page, server):
    """ibis's own big session, captured while its Sessions page is open: the bar fills without a reload (the
    panel's event stream), and ends full; kite's turns are never counted in ibis's bar."""
    base = login(page, server, "ibis")
    turns = 1200
    lines = [json.dumps({"type": "user" if i % 2 == 0 else "assistant", "sessionId": "ibis-big",
                         "cwd": "/home/me/src/ibis", "timestamp": f"2025-10-12T09:{i % 60:02d}:00.000Z", "uuid": f"u{i}",
                         "message": {"role": "user" if i % 2 == 0 else "assistant",
                                     "content": f"turn {i}: the ibis ledger reconciles batch {i} against the bank feed"
                                     if i % 2 == 0 else [{"type": "text", "text": f"Batch {i} reconciled."}]}})
             for i in range(turns)]
    captured = httpx2.post(f"{server.base_url}/sessions/capture", timeout=60,
                           headers={"Authorization": f"Bearer {server.tokens['ibis']}"},
                           json={"client": "claude", "session_id": "ibis-big", "cwd": "/home/me/src/ibis",
                                 "first_line": 0, "lines": lines, "event": "Stop"})
    assert captured.status_code == 200, captured.text
    page.goto(base + "/sessions")
    text, bar = page.locator("#indexing-text"), page.locator("#indexing-bar")
    assert bar.get_attribute("max") == str(turns)
    first = int(bar.get_attribute("value"))
    if first < turns:  # the page came while the turns were being indexed: it follows them live
        expect(text).to_contain_text(f"of {turns:,} turns")
        shot(page, "sessions-indexing")
    expect(text).to_have_text(f"All {turns:,} turns are indexed for search.", timeout=180_000)
    assert bar.get_attribute("value") == str(turns)
    assert first < turns, "the session was indexed before the page loaded: make it bigger to see the bar move"
