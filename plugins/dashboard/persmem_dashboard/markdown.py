"""Markdown (mail bodies, notes that assistants write) as HTML that is safe to put in a dashboard page.

Two well-kept libraries, each doing one half: markdown-it-py renders with raw HTML disabled (a `<script>` in the
text stays text), then nh3 (ammonia) keeps only the tags and attributes Markdown produces. What is refused:
- raw HTML, event handlers, `style` and `class` attributes (nothing a sender writes can change the page);
- links other than http, https and mailto (no javascript:, data:, or relative links into the dashboard); the
  links that stay get rel="noopener noreferrer nofollow" and open in a new tab;
- images: `![alt](url)` becomes a link "image: alt" to the image, never an `<img>`. A remote image loads as soon as a
  message is opened and tells its server who read it and when (a tracking pixel); the dashboard's CSP would
  block it anyway (img-src 'self' data:), leaving a broken image. A link is shown and loads only on a click.
The page's CSP (script-src 'self', no inline script) is the second wall if either library ever has a bug.

A body longer than MARKDOWN_LIMIT characters is shown as plain text: markdown-it takes up to ~3 µs a character,
and a mail page holds up to 100 bodies of up to 200,000 characters."""

from __future__ import annotations

import functools
import html

import nh3
from markdown_it import MarkdownIt
from markupsafe import Markup

# "js-default": CommonMark plus tables and strikethrough, html=False; breaks=True keeps the line breaks of
# plain-text mail (signatures, addresses) that CommonMark would join into one line
_MARKDOWN = MarkdownIt("js-default", {"breaks": True})


def _image_as_link(renderer, tokens, idx, options, env) -> str:
    image = tokens[idx]
    alt = renderer.renderInlineAsText(image.children or [], options, env) or "image"
    return f'<a href="{html.escape(str(image.attrGet("src") or ""), quote=True)}">image: {html.escape(alt)}</a>'


_MARKDOWN.add_render_rule("image", _image_as_link)
MARKDOWN_LIMIT = 20_000

_CLEANER = nh3.Cleaner(
    tags={"p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "strong", "em", "s", "del", "code", "pre",
          "blockquote", "ul", "ol", "li", "a", "table", "thead", "tbody", "tr", "th", "td"},
    clean_content_tags={"script", "style"},
    attributes={"a": {"href", "title"}, "ol": {"start"}},
    url_schemes={"http", "https", "mailto"},
    url_relative="deny",
    link_rel="noopener noreferrer nofollow",
    set_tag_attribute_values={"a": {"target": "_blank"}},
)


@functools.lru_cache(maxsize=256)  # a page shows the same messages on every reload
def render_markdown(text: str | None) -> Markup:
    """`text` rendered as Markdown and sanitised: markup that is safe to show as is (a long text: escaped,
    in a <pre>)."""
    if not text:
        return Markup("")
    text = str(text)
    if len(text) > MARKDOWN_LIMIT:
        return Markup('<pre class="plain">{}</pre>').format(text)
    return Markup(_CLEANER.clean(_MARKDOWN.render(text)))
