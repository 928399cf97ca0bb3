"""The Memories panel's search, in a real Chromium against a real server: it drops what memory_search drops
(the same relevance floor, through the service's search), says how many weaker matches it left out, and marks
each hit that a later memory replaced (superseded_by) or restates (restated_by) with a link to that memory."""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

from persmem_core.sdk.testing import browser_page, chromium_browser, clean_env, dashboard_login, start_server

UNRELATED = ["Bake the sourdough at 230 degrees for forty minutes.", "The cat prefers the blue cushion by the window.",
             "Tomatoes need staking once they pass thirty centimetres.", "The choir rehearses on Thursday evenings.",
             "Replace the bicycle chain every three thousand kilometres.", "Basil wilts when the nights drop below 8 C.",
             "The library closes early on public holidays.", "Knit the scarf in a simple two by two rib."]
QUERY = "which port does the staging database listen on"


def call(server, name, args):
    with ThreadPoolExecutor(1) as pool:  # Playwright's sync API owns this thread's event loop
        return pool.submit(server.call_tool, name, args, agent="kite").result(timeout=120)


def test_search_panel_applies_the_floor_and_links_what_replaced_a_hit(tmp_path):
    home = tmp_path / "home"
    server = start_server(home, ("kite",), clean_env(home, PERSMEM_DISABLE_PLUGINS="shell,git,searxng"))
    try:
        old = call(server, "memory_store", {"content": "The staging database listens on port 5432.",
                                            "project": "infra"})["id"]
        new = call(server, "memory_store", {"content": "The staging database moved to port 6432 (pgbouncer).",
                                            "project": "infra", "supersedes": old})["id"]
        for text in UNRELATED:
            call(server, "memory_store", {"content": text, "project": "home"})
        tool = call(server, "memory_search", {"query": QUERY, "top_k": 20, "verbose": True})
        with chromium_browser() as chromium, browser_page(chromium) as page:
            base = dashboard_login(page, server)
            page.goto(f"{base}/memories?q={quote(QUERY)}")
            caption = page.locator("p.meta", has_text="best match").inner_text()
            shown = page.locator("#memory-list details.memory").evaluate_all("els => els.map(e => e.dataset.id)")
            badges = {i: page.locator(f'details.memory[data-id="{i}"] .lifecycle-badges').all_inner_texts()
                      for i in shown}
            links = page.locator(f'details.memory[data-id="{old}"] .lc-superseded a').evaluate_all(
                "els => els.map(e => e.getAttribute('href'))") if old in shown else []
    finally:
        server.stop()
    below = re.search(r"(\d+) weaker match(?:es)? below the relevance floor not shown", caption)
    assert below and int(below.group(1)) > 0, caption
    assert f"{len(shown)} best match" in caption, caption
    assert len(shown) + int(below.group(1)) == 10, "every memory is either shown or counted below the floor"
    assert [r["id"] for r in tool["results"]] == shown[:len(tool["results"])], (tool, shown)
    assert tool["below_score_floor"] == int(below.group(1)), (tool, caption)
    assert new in shown and len(shown) < 10
    for hit in tool["results"]:  # what memory_search marks, the panel links
        for mark, label in (("superseded_by", "superseded by"), ("restated_by", "restated by")):
            if hit["id"] in shown and mark in hit:
                assert f"{label} {hit[mark]}"[:len(label) + 9] in " ".join(badges[hit["id"]]), (hit, badges)
    assert old in shown and any(new in (href or "") for href in links), (shown, links)
