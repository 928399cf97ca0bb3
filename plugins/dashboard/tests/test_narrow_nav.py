"""At a phone's width (390 x 844) every nav entry is on screen and opens its page (the nav wraps onto more lines
rather than hiding entries off to the side), and no page is wider than the screen (wide content wraps or scrolls
inside its own box)."""

from __future__ import annotations

from dashfixtures import login, shot

WIDTH = 390


def test_every_nav_entry_is_visible_and_no_page_is_wider_than_390px(browser, server):
    context = browser.new_context(viewport={"width": WIDTH, "height": 844})
    page = context.new_page()
    try:
        login(page, server)
        entries = page.locator("nav.nav a").evaluate_all("els => els.map(e => e.getAttribute('href'))")
        assert len(entries) >= 5 and any(href.endswith("/system") for href in entries), entries
        for href in entries:
            link = page.locator(f'nav.nav a[href="{href}"]')
            box = link.bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, (href, box)
            text = link.inner_text()
            assert link.evaluate("e => e.scrollWidth <= e.clientWidth"), f"{text!r} is cut off"
            with page.expect_navigation():
                link.click()
            assert page.url.split("?")[0].endswith(href), (page.url, href)
            width = page.evaluate("document.documentElement.scrollWidth")
            shot(page, f"narrow-{href.rsplit('/', 1)[-1]}")
            assert width <= WIDTH, f"{href} is {width} px wide at a {WIDTH} px screen"
    finally:
        context.close()
