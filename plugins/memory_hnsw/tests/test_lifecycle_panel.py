"""The memory lifecycle on the dashboard, in a real Chromium against a real server, with data stored through the
real MCP tools: the Memories panel shows a restated fact's supersession chain with how and why it was linked,
the Lifecycle panel lists consolidated memories with their members, what a consolidation would gather now, what
is due for review and what has expired; memory text that is HTML stays text; a private collection shows the
logged-in agent only its own entries."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from playwright.sync_api import expect

from persmem_core.sdk.testing import (
    browser_page,
    chromium_browser,
    clean_env,
    dashboard_login as login,
    start_server,
    write_config,
)

ARTIFACTS = Path(__file__).parents[3] / "test-artifacts" / "dashboard"  # screenshots, as the dashboard's tests
HOSTILE = "<img src=x onerror=alert('lc')><script>alert('lifecycle xss')</script> kept as text"


@pytest.fixture(scope="module")
def lc_server(tmp_path_factory):
    """A server of its own: consolidation here takes memories of any age, in clusters of two (the defaults wait
    7 days and want three), and never runs by itself while the test looks."""
    home = tmp_path_factory.mktemp("lifecycle-panel-home")
    write_config(home, {"memory": {"consolidate_min_age_days": 0.0, "consolidate_min_cluster": 2,
                                   "consolidate_every_hours": 0.0, "private_collections": ["sessions", "diary"]}})
    server = start_server(home, ("kite", "wren"), clean_env(home, PERSMEM_DISABLE_PLUGINS="shell,git,searxng"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def lc_browser():
    with chromium_browser(ARTIFACTS) as chromium:
        yield chromium


@pytest.fixture
def lc_page(lc_browser):
    with browser_page(lc_browser) as page:
        yield page


def call(server, name, args, agent):
    """A real MCP tool call, from a worker thread: Playwright's sync API owns this thread's event loop."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(server.call_tool, name, args, agent=agent).result(timeout=120)



def shot(page, name):
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def test_a_restated_fact_shows_its_chain_with_how_and_why(lc_page, lc_server):
    old = call(lc_server, "memory_store", {"content": "Staging runs on Postgres 15 on the db-stage-1 host.",
                                           "project": "atlas", "memory_type": "fact", "tags": "staging"}, "kite")
    new = call(lc_server, "memory_store", {"content": "We moved staging from Postgres to SQLite in May.",
                                           "project": "atlas", "memory_type": "fact", "tags": "staging",
                                           "supersedes": old["id"]}, "kite")
    assert [link["id"] for link in new["supersedes"]] == [old["id"]]
    call(lc_server, "memory_validate", {"memory_id": new["id"], "helpful": True, "note": "confirmed"}, "wren")
    found = call(lc_server, "memory_search", {"query": "staging database", "project": "atlas"}, "wren")
    assert new["id"] in [r["id"] for r in found["results"]]
    base = login(lc_page, lc_server)
    lc_page.goto(base + "/memories?q=what+database+does+staging+run+on")
    current, older = (lc_page.locator(f'details.memory[data-id="{i}"]') for i in (new["id"], old["id"]))
    expect(current).to_have_count(1)
    expect(older).to_have_count(1)
    ids = lc_page.locator("details.memory").evaluate_all("els => els.map(e => e.dataset.id)")
    assert ids.index(new["id"]) < ids.index(old["id"])  # the current statement ranks above the one it replaced
    expect(older.locator(".lc-superseded")).to_have_text(f"superseded by {new['id']}")
    expect(current.locator(".lc-supersedes")).to_have_text(f"supersedes {old['id']}")
    expect(current.locator(".lc-confidence")).to_have_text("confidence 0.67 (1 helpful, 0 not)")
    expect(current.locator(".lc-retrievals")).to_have_text("retrieved 1×")  # memory_search counted; this page not
    expect(older.locator(".lc-confidence")).to_have_count(0)

    older.locator("summary").first.click()
    steps = older.locator("li.chain-step")
    expect(steps).to_have_count(2)
    expect(steps.nth(0)).to_have_attribute("data-id", old["id"])
    expect(steps.nth(0)).to_contain_text("Staging runs on Postgres 15")
    expect(steps.nth(1)).to_have_attribute("data-id", new["id"])
    expect(steps.nth(1)).to_contain_text("We moved staging from Postgres to SQLite")
    expect(steps.nth(1).locator(".link-why")).to_contain_text(f"replaced {old['id']}")
    expect(steps.nth(1).locator(".lc-how")).to_have_text("explicit")
    expect(steps.nth(1).locator(".link-why")).to_contain_text("by kite")
    shot(lc_page, "memories-supersession-chain")

    older.locator(".lc-superseded a").click()  # the badge leads to the successor
    expect(lc_page.locator("details.memory")).to_have_count(1)
    expect(lc_page.locator("details.memory")).to_have_attribute("data-id", new["id"])
    expect(lc_page.locator("details.memory pre.body")).to_have_text("We moved staging from Postgres to SQLite in May.")


def test_a_detected_link_shows_its_similarity_and_shared_terms_and_an_unlink(lc_page, lc_server):
    def store(text):
        return call(lc_server, "memory_store", {"content": text, "project": "orders", "memory_type": "fact"}, "wren")

    old = store("The nightly backup of the orders database runs at 02:00 UTC.")
    new = store("The nightly backup of the orders database now runs at 04:00 UTC.")
    got = call(lc_server, "memory_get", {"memory_id": new["id"]}, "wren")  # waits for its embedding and detection
    assert got["supersedes"] == [old["id"]], got
    base = login(lc_page, lc_server)
    lc_page.goto(f"{base}/memories?id={new['id']}")
    step = lc_page.locator("li.chain-step").nth(1)
    expect(step.locator(".lc-how")).to_have_text("detected")
    expect(step.locator(".link-why")).to_contain_text("similarity")
    expect(step.locator(".link-why")).to_contain_text("backup")  # a shared subject term
    lc_page.goto(f"{base}/lifecycle")
    row = lc_page.locator(f'#links li[data-id="{new["id"]}"][data-target="{old["id"]}"]')
    expect(row).to_contain_text("detected")
    expect(row).to_contain_text("similarity")
    expect(row).to_contain_text("runs at 02:00 UTC")

    call(lc_server, "memory_unlink", {"memory_id": old["id"]}, "wren")  # undone: the history says so
    lc_page.goto(f"{base}/memories?id={old['id']}")
    expect(lc_page.locator("details.memory .lc-superseded")).to_have_count(0)
    expect(lc_page.locator("li.chain-step")).to_have_count(0)
    lc_page.goto(f"{base}/memories?id={new['id']}")
    history = lc_page.locator("details.memory ul.link-history li")
    expect(history).to_have_count(2)
    expect(history.nth(0)).to_contain_text(f"unlinked {old['id']}")
    expect(history.nth(1)).to_contain_text(f"linked {old['id']}")


def test_the_lifecycle_panel_lists_clusters_consolidations_due_and_expired(lc_page, lc_server):
    facts = ["The deploy pipeline for the payments service runs integration tests before release.",
             "The payments service deploy pipeline runs the integration tests before every release.",
             "Before a release, the payments deploy pipeline runs integration tests first."]
    # Notes in one batch (memory_bulk_store links none of them as restating another, as memory_store would)
    stored = call(lc_server, "memory_bulk_store", {"chunks": [{"content": text, "type": "note"} for text in facts],
                                                   "project": "payments", "context_chars": 0}, "kite")
    members = [result["id"] for result in stored["results"]]
    due = call(lc_server, "memory_store", {"content": "The on-call rota is owned by the platform team.",
                                           "project": "people", "memory_type": "fact",
                                           "review_after": "2020-01-01"}, "wren")["id"]
    gone = call(lc_server, "memory_store", {"content": "The spring sale code SPRING20 works until April.",
                                            "project": "shop", "memory_type": "fact",
                                            "valid_until": "2020-04-30"}, "wren")["id"]
    base = login(lc_page, lc_server)
    lc_page.goto(base + "/lifecycle")
    expect(lc_page.locator(f'#due li[data-id="{due}"]')).to_contain_text("on-call rota")
    expect(lc_page.locator(f'#due li[data-id="{due}"]')).to_contain_text("review after 2020-01-01")
    expect(lc_page.locator(f'#expired li[data-id="{gone}"]')).to_contain_text("SPRING20")
    expect(lc_page.locator(f'#expired li[data-id="{gone}"]')).to_contain_text("valid until 2020-04-30")

    lc_page.click("#preview-form button")  # the dry run: what a consolidation would gather now
    expect(lc_page.locator("#preview-caption")).to_contain_text("nothing written")
    cluster = lc_page.locator("details.cluster").filter(has=lc_page.locator(f'li.member[data-id="{members[0]}"]'))
    expect(cluster).to_have_count(1)
    expect(cluster.locator("li.member")).to_have_count(3)
    expect(lc_page.locator("#consolidated-caption")).to_contain_text("0 consolidated")

    report = call(lc_server, "memory_consolidate", {"project": "payments", "dry_run": False}, "kite")
    assert report["created"] == 1, report
    lc_page.goto(base + "/lifecycle")
    consolidated = lc_page.locator("details.consolidated")
    expect(consolidated).to_have_count(1)
    expect(consolidated.locator(".badge")).to_have_text("consolidates 3")
    consolidated.locator("summary").click()
    listed = consolidated.locator("li.member")
    expect(listed).to_have_count(3)
    for member_id, text in zip(members, facts, strict=True):
        expect(consolidated.locator(f'li.member[data-id="{member_id}"]')).to_contain_text(text)
    shot(lc_page, "lifecycle")

    lc_page.goto(f"{base}/memories?id={members[1]}")  # a member names what gathered it
    expect(lc_page.locator(".lc-consolidated-into")).to_contain_text("consolidated into con_")
    lc_page.goto(base + "/memories?q=spring+sale+code")  # expired: hidden from a search unless asked
    expect(lc_page.locator(f'details.memory[data-id="{gone}"]')).to_have_count(0)
    lc_page.click("#expired-toggle")
    expect(lc_page.locator(f'details.memory[data-id="{gone}"] .lc-expired')).to_have_text("expired")
    lc_page.goto(f"{base}/memories?id={due}")
    expect(lc_page.locator(".lc-review-due")).to_have_text("review due")


def test_memory_text_that_is_html_stays_text_on_both_panels(lc_page, lc_server):
    old = call(lc_server, "memory_store", {"content": "The status page lives at status.example.org.",
                                           "project": "web", "memory_type": "fact"}, "kite")
    new = call(lc_server, "memory_store", {"content": HOSTILE, "project": "web", "memory_type": "fact",
                                           "supersedes": old["id"], "review_after": "2021-06-01"}, "kite")
    base = login(lc_page, lc_server)
    lc_page.goto(f"{base}/memories?id={old['id']}")
    expect(lc_page.locator("li.chain-step").nth(1).locator(".chain-text")).to_have_text(HOSTILE)
    lc_page.goto(base + "/lifecycle")
    expect(lc_page.locator(f'#due li[data-id="{new["id"]}"] .snippet')).to_have_text(HOSTILE)
    expect(lc_page.locator(f'#links li[data-id="{new["id"]}"] .snippet').first).to_have_text(HOSTILE)
    assert lc_page.locator("main img, main script").count() == 0
    assert lc_page.dialogs == []
    shot(lc_page, "lifecycle-html-as-text")


def test_a_private_collection_shows_only_the_viewers_own_and_previews_nothing(lc_page, lc_server):
    mine = call(lc_server, "memory_store", {"content": "Kite's own reminder to recheck the runbook.",
                                            "project": "me", "memory_type": "note", "collection": "diary",
                                            "review_after": "2020-02-02"}, "kite")["id"]
    theirs = call(lc_server, "memory_store", {"content": "Wren's private reminder to recheck the runbook.",
                                              "project": "me", "memory_type": "note", "collection": "diary",
                                              "review_after": "2020-02-02"}, "wren")["id"]
    base = login(lc_page, lc_server)
    lc_page.goto(f"{base}/lifecycle?collection=diary&preview=1")
    expect(lc_page.locator(f'#due li[data-id="{mine}"]')).to_have_count(1)
    expect(lc_page.locator(f'#due li[data-id="{theirs}"]')).to_have_count(0)
    expect(lc_page.locator("main")).not_to_contain_text("Wren's private")
    expect(lc_page.locator("#preview-note")).to_contain_text("not previewed in a private collection")
    lc_page.goto(f"{base}/memories?collection=diary&id={theirs}")
    expect(lc_page.locator("details.memory")).to_have_count(0)


def test_the_lifecycle_panel_fits_a_phone(lc_browser, lc_server):
    context = lc_browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
    page = context.new_page()
    try:
        base = login(page, lc_server)
        for path, name in (("/lifecycle?preview=1", "phone-lifecycle"), ("/memories?q=staging", "phone-chain")):
            page.goto(base + path)
            page.locator("details").first.locator("summary").first.click()  # opened: a cluster, a chain
            assert page.evaluate("document.documentElement.scrollWidth") <= 391, name  # the phone's width
            shot(page, name)
    finally:
        context.close()
