"""The dashboard in a real Chromium against a real server with real data."""

import time

import httpx2
from playwright.sync_api import expect

from dashfixtures import login, shot, tool  # tests/ is on sys.path under pytest's default import mode


def test_refused_without_login_and_with_a_wrong_token(page, server):
    base = server.url.replace("/mcp", "/dashboard")
    page.goto(base + "/memories")
    expect(page).to_have_url(base + "/login")
    page.fill("#token", "pm_not-a-real-token")
    page.click("button[type=submit]")
    expect(page.locator(".error")).to_have_text("That token is not valid for the dashboard.")
    shot(page, "login-refused")
    assert httpx2.get(base + "/mail/events", timeout=10).status_code == 401
    assert httpx2.get(base + "/overview", timeout=10, follow_redirects=False).status_code == 303
    assert httpx2.post(base + "/logout", timeout=10).status_code == 403  # no CSRF token


def test_overview_numbers_match_the_store(page, server):
    login(page, server)
    stats = tool(server, "memory_stats", {}, agent="kite")
    expect(page.locator("#stat-memories")).to_have_text(str(stats["count"]))
    expect(page.locator("#stat-projects")).to_have_text(str(len(stats["projects"])))
    expect(page.locator("#stat-types")).to_have_text(str(len(stats["types"])))
    expect(page.locator("#stat-tags")).to_have_text(str(stats["unique_tags"]))
    assert page.locator("img.chart").count() == 4
    response = page.request.get(page.url)
    assert response.headers["x-frame-options"] == "DENY"
    assert "frame-ancestors 'none'" in response.headers["content-security-policy"]
    shot(page, "overview")


def test_overview_shows_how_much_of_a_backfill_is_embedded_yet(page, server):
    """Issue 36: a bulk import is acknowledged long before it is embedded; Overview shows how far that got."""
    turns = [{"content": f"backfilled turn {i}: the deploy of build {i} went to staging at {i % 24}:00"}
             for i in range(1000)]
    for _ in range(3):
        tool(server, "memory_bulk_store", {"chunks": turns, "collection": "backfill", "project": f"p{_}"},
             agent="kite")
    base = login(page, server)
    page.goto(base + "/overview?collection=backfill")
    progress = page.locator("#embedding-progress")
    expect(progress).to_be_visible()  # 3,000 turns take the embedder tens of seconds on two cores
    done, total = (int(progress.get_attribute(name)) for name in ("value", "max"))
    assert total == 3000 and done < total
    shot(page, "overview-embedding")
    deadline = time.time() + 300
    while page.locator("#embedding-progress").count() and time.time() < deadline:
        time.sleep(2)
        page.reload()
    expect(page.locator("#embedding")).to_have_count(0)  # all embedded: the card is gone
    expect(page.locator("#stat-memories")).to_have_text("3000")


def test_search_and_expand_a_memory_with_its_versions(page, server):
    base = login(page, server)
    page.goto(base + "/memories")
    page.fill("input[name=q]", "how long is the cache ttl")
    page.click("form.filters button")
    first = page.locator("details.memory").first
    expect(first.locator("summary strong")).to_have_text("Cache TTL is 10 minutes.")
    first.locator("summary").first.click()
    expect(first.locator("pre.body").first).to_be_visible()
    expect(first.locator("details.version summary")).to_contain_text("version 1")
    first.locator("details.version summary").click()
    expect(first.locator("details.version pre.body")).to_have_text("Cache TTL is 5 minutes.")
    page.select_option("select[name=project]", "billing")
    page.fill("input[name=q]", "")
    page.click("form.filters button")
    expect(page.locator("details.memory")).to_have_count(1)
    shot(page, "memories")


def test_a_stored_script_is_shown_as_text(page, server):
    base = login(page, server)
    page.goto(base + "/memories?q=stored+xss")
    item = page.locator("details.memory").first
    item.locator("summary").first.click()
    expect(item.locator("pre.body")).to_contain_text("<script>alert('stored xss')</script>")
    assert page.locator("main script").count() == 0 and page.dialogs == []
    shot(page, "memories-xss-as-text")


def test_a_message_sent_with_amq_send_appears_live_within_2_seconds(page, server):
    base = login(page, server, agent="operator")
    page.goto(base + "/mail")
    expect(page.locator("#live-state")).to_have_text("Live: connected.")
    expect(page.locator("details.message")).to_have_count(1)
    sent_at = time.monotonic()
    tool(server, "amq_send", {"to_agent": "kite", "subject": "Live <b>one</b>",
                                  "body": "<img src=x onerror=alert(1)> looks good"}, agent="wren")
    live = page.locator("details.message[data-live]")
    expect(live).to_have_count(1, timeout=2000)
    assert time.monotonic() - sent_at < 2.5
    expect(live.locator(".subject")).to_have_text("Live <b>one</b>")
    expect(page.locator('#unread [data-agent="kite"] b')).to_have_text("1")
    live.locator("summary").click()
    expect(live.locator(".body")).to_have_text("<img src=x onerror=alert(1)> looks good")
    assert live.locator(".body img").count() == 0
    assert page.dialogs == []
    shot(page, "mail-live")
    live.locator("a", has_text="thread").click()
    expect(page.locator("h2")).to_contain_text("Thread")
    shot(page, "mail-thread")


def test_system_page_and_a_third_party_panel(page, server):
    base = login(page, server)
    page.goto(base + "/system")
    for plugin in ("memory_hnsw", "amq_maildir", "dashboard", "panel_plugin_for_tests"):
        expect(page.locator("table").first).to_contain_text(plugin)
    expect(page.locator("table.doctor")).to_contain_text("PASS")
    expect(page.locator("main")).to_contain_text("kite")
    shot(page, "system")
    page.click("nav >> text=Weather")
    expect(page.locator("#weather")).to_have_text("Forecast for Kite Hill: clear, asked by kite <b>")
    shot(page, "third-party-panel")


def test_phone_width(browser, server):
    context = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    try:
        base = login(page, server)
        for name in ("overview", "memories", "mail"):
            page.goto(f"{base}/{name}")
            assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), name
            shot(page, f"phone-{name}")
    finally:
        context.close()
