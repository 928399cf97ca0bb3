"""Helpers for the dashboard tests: log in (in Chromium or over plain HTTP), save a screenshot, call a tool."""

from pathlib import Path

from persmem_core.sdk.testing import dashboard_login as login  # noqa: F401 - the dashboard tests' name for it

ARTIFACTS = Path(__file__).parents[3] / "test-artifacts" / "dashboard"


def csrf_of(html: str) -> str:
    """The CSRF token of the first form on a dashboard page."""
    return html.split('name="_csrf_token" value="', 1)[1].split('"', 1)[0]


def http_login(client, server, agent):
    """Log in with plain HTTP as the login form does: GET the form (CSRF cookie and token), POST the token."""
    base = server.url.replace("/mcp", "/dashboard")
    form = client.get(base + "/login")
    return client.post(base + "/login", data={"token": server.tokens[agent], "_csrf_token": csrf_of(form.text)})


def shot(page, name):
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def tool(server, name, args, agent):
    """Call an MCP tool from a worker thread: Playwright's sync API owns this thread's event loop."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(server.call_tool, name, args, agent=agent).result(timeout=60)
