"""What the dashboard draws, in a real Chromium against a real server: Markdown mail bodies (rendered, and
sanitised against hostile senders), charts legible on a desktop and a phone, the filter form, the favicon.

Screenshots for people to check go to test-artifacts/issue15 (desktop-*.png at 1280x800, phone-*.png at 390x844)."""

import base64
import re

import httpx2
import pytest
from playwright.sync_api import expect

from dashfixtures import ARTIFACTS, http_login, login, tool

SHOTS = ARTIFACTS.parent / "issue15"
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
SMALLEST_CHART_TEXT_PX = 11

MARKDOWN_BODY = """# Release notes

The **cache** change is ready; see [the design doc](https://example.com/design) for details.

- TTL raised to *10 minutes*
- `persmem memory stats` shows the hit rate

```python
CACHE_TTL = 600
```

> Ping me before Tuesday's deploy.
"""

HOSTILE_BODIES = {
    "script tag": "<script>window.pwned = 'script'</script> hello",
    "event handler": "<img src=x onerror=\"window.pwned='onerror'\"> and <b onmouseover=alert(1)>hover</b>",
    "javascript link": "[click me](javascript:window.pwned='link') and [mixed case](JaVaScRiPt:alert(1)) "
                       "and [entity](jav&#x61;script:alert(1))",
    "raw html": '<iframe src="https://evil.example/"></iframe><form action="https://evil.example/"><input name=q>'
                '<button>go</button></form><a href="https://evil.example/" onclick="alert(1)">raw link</a>',
    "data and relative links": "[data](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==) "
                               "[logout](/dashboard/logout)",
    "remote image": "![tracking pixel](https://tracker.example/p.gif?who=operator)",
}


def _send(server, subject, body, sender="kite", to="wren"):
    return tool(server, "amq_send", {"to_agent": to, "subject": subject, "body": body},
                agent=sender)


@pytest.fixture(scope="module")
def seeded(server):
    _send(server, "Release notes in Markdown", MARKDOWN_BODY)
    for name, body in HOSTILE_BODIES.items():
        _send(server, f"hostile: {name}", body, sender="wren", to="kite")
    return server


def _watch(page):
    """CSP reports on the console: the sanitiser, not the CSP, must be what stops a hostile body."""
    page.csp_reports = []
    page.on("console", lambda m: "Content Security Policy" in m.text and page.csp_reports.append(m.text))
    return page


def _assert_nothing_hostile_survived(page, scope):
    feed = page.locator(scope)
    assert feed.locator("script, img, iframe, form, input, object, embed, style").count() == 0
    assert page.evaluate("""(scope) => [...document.querySelectorAll(scope + ' *')]
        .flatMap(e => [...e.attributes].map(a => a.name)).filter(n => n.startsWith('on') || n === 'style')""",
                         scope) == []
    hrefs = page.evaluate(f"[...document.querySelectorAll('{scope} a[href]')].map(a => a.getAttribute('href'))")
    assert all(h.startswith(("https://", "http://", "mailto:", "/dashboard/mail?thread=")) for h in hrefs), hrefs
    assert page.evaluate("window.pwned") is None
    assert page.dialogs == [] and page.csp_reports == []


# --- hostile Markdown in mail bodies: rendered as Markdown, nothing of the sender's HTML runs or loads ---

def test_markdown_mail_body_is_rendered(page, seeded):
    base = login(page, seeded, agent="operator")
    page.goto(base + "/mail")
    message = page.locator("details.message", has_text="Release notes in Markdown").first
    message.locator("summary").click()
    body = message.locator(".body.markdown")
    expect(body.locator("h1")).to_have_text("Release notes")
    expect(body.locator("strong")).to_have_text("cache")
    expect(body.locator("li")).to_have_count(2)
    expect(body.locator("pre code")).to_have_text("CACHE_TTL = 600\n")
    expect(body.locator("blockquote")).to_contain_text("Ping me before Tuesday")
    link = body.locator("a", has_text="the design doc")
    expect(link).to_have_attribute("href", "https://example.com/design")
    expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")
    expect(link).to_have_attribute("target", "_blank")


def test_hostile_mail_bodies_run_nothing_and_load_nothing(page, seeded):
    _watch(page)
    base = login(page, seeded, agent="operator")
    requests = []
    page.on("request", lambda r: requests.append(r.url))
    page.goto(base + "/mail")
    for details in page.locator("details.message").all():
        details.locator("summary").click()
    expect(page.locator("details.message[open]")).to_have_count(len(HOSTILE_BODIES) + 2)
    _assert_nothing_hostile_survived(page, "#feed")
    feed = page.locator("#feed")
    expect(feed).to_contain_text("<script>window.pwned = 'script'</script> hello")  # shown as text
    expect(feed).to_contain_text("[click me](javascript:window.pwned='link')")  # not a link
    expect(feed.locator("a", has_text="image: tracking pixel")).to_have_attribute(
        "href", "https://tracker.example/p.gif?who=operator")  # a link to click, not an image that loads
    assert not [u for u in requests if "example" in u], requests


def test_a_hostile_body_arriving_live_is_sanitised_too(page, seeded):
    _watch(page)
    base = login(page, seeded, agent="operator")
    page.goto(base + "/mail")
    expect(page.locator("#live-state")).to_have_text("Live: connected.")
    _send(seeded, "live hostile", "## Live **bold**\n\n" + "\n\n".join(HOSTILE_BODIES.values()), sender="wren", to="kite")
    live = page.locator("details.message[data-live]")
    expect(live).to_have_count(1, timeout=5000)
    live.locator("summary").click()
    expect(live.locator(".body.markdown h2")).to_have_text("Live bold")
    _assert_nothing_hostile_survived(page, "#feed")


def test_javascript_links_are_refused_in_every_spelling(seeded):
    with httpx2.Client(timeout=10, follow_redirects=True) as client:
        http_login(client, seeded, "operator")
        html = client.get(seeded.url.replace("/mcp", "/dashboard") + "/mail").text
    feed = html.split('id="feed"', 1)[1].split("</ul>", 1)[0]
    assert not re.search(r"<(script|img|iframe|form)\b", feed)
    assert not re.search(r"<[a-z][^>]*\son\w+\s*=", feed, re.I)
    assert not re.search(r'href="\s*(javascript|data|vbscript):', feed, re.I)


# --- charts, filters, favicon: legible on a desktop and a phone ---

def _chart_text_sizes(page) -> list[tuple[str, float]]:
    """(chart, smallest text in px as shown) for every chart on the page: the SVG's smallest font size times
    the ratio of the width it is shown at to the width it was drawn at."""
    sizes = []
    for img in page.locator("img.chart").all():
        src = img.evaluate("i => i.currentSrc")
        svg = base64.b64decode(src.split(",", 1)[1]).decode()
        drawn = float(re.search(r'viewBox="0 0 ([\d.]+) ', svg).group(1))
        fonts = [float(f) for f in re.findall(r"font-size:\s*([\d.]+)px", svg)]
        shown = img.bounding_box()["width"]
        sizes.append((img.get_attribute("alt")[:40], min(fonts) * shown / drawn))
    return sizes


@pytest.mark.parametrize("viewport", [DESKTOP, {"width": 800, "height": 900}, PHONE],
                         ids=["desktop", "tablet", "phone"])
def test_no_chart_text_is_smaller_than_11px(browser, seeded, viewport):
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    try:
        login(page, seeded)
        sizes = _chart_text_sizes(page)
        assert len(sizes) == 4
        assert all(px >= SMALLEST_CHART_TEXT_PX for _, px in sizes), sizes
    finally:
        context.close()


def test_donut_legends_carry_their_counts(page, seeded):
    login(page, seeded)
    svg = base64.b64decode(page.locator("img.chart-donut").first.get_attribute("src").split(",", 1)[1]).decode()
    stats = tool(seeded, "memory_stats", {}, agent="kite")
    for project, count in stats["projects"].items():
        assert f"{project} ({count})" in svg


def test_the_filter_form_is_one_line_at_1280px(page, seeded):
    base = login(page, seeded)
    page.goto(base + "/memories")
    tops = page.evaluate("[...document.querySelectorAll('form.filters > *')].map(e => e.getBoundingClientRect().top)")
    assert len(tops) == 8 and max(tops) - min(tops) < 4, tops


def test_favicon_is_declared_and_served_without_login(page, seeded):
    base = seeded.url.replace("/mcp", "/dashboard")
    page.goto(base + "/login")
    href = page.locator('link[rel="icon"]').get_attribute("href")
    assert href == "/dashboard/static/favicon.svg"
    icon = httpx2.get(seeded.url.replace("/mcp", "") + href, timeout=10)
    assert icon.status_code == 200 and icon.headers["content-type"].startswith("image/svg+xml")
    login(page, seeded)
    expect(page.locator('link[rel="icon"]')).to_have_attribute("href", href)


@pytest.mark.parametrize("name,viewport", [("desktop", DESKTOP), ("phone", PHONE)])
def test_screenshots_for_review(browser, seeded, name, viewport):
    SHOTS.mkdir(parents=True, exist_ok=True)
    context = browser.new_context(viewport=viewport, is_mobile=name == "phone")
    page = context.new_page()
    try:
        base = login(page, seeded, agent="operator")
        page.screenshot(path=str(SHOTS / f"{name}-overview.png"), full_page=True)
        page.goto(base + "/mail")
        for subject in ("Release notes in Markdown", "hostile: raw html", "hostile: event handler"):
            page.locator("details.message", has_text=subject).first.locator("summary").click()
        page.screenshot(path=str(SHOTS / f"{name}-mail.png"), full_page=True)
        page.goto(base + "/memories")
        page.locator("details.memory").first.locator("summary").first.click()
        page.screenshot(path=str(SHOTS / f"{name}-memories.png"), full_page=True)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    finally:
        context.close()
