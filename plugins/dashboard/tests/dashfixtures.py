"""Helpers for the browser tests: log in, save a screenshot."""

from pathlib import Path

ARTIFACTS = Path(__file__).parents[3] / "test-artifacts" / "dashboard"


def login(page, server, agent="kite"):
    base = server.url.replace("/mcp", "/dashboard")
    page.goto(base + "/login")
    page.fill("#token", server.tokens[agent])
    page.click("button[type=submit]")
    page.wait_for_url(base + "/overview")
    return base


def shot(page, name):
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def tool(server, name, args, agent):
    """Call an MCP tool from a worker thread: Playwright's sync API owns this thread's event loop."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(server.call_tool, name, args, agent=agent).result(timeout=60)
