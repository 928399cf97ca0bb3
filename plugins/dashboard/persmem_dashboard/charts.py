"""Charts as SVG images, rendered on the server with pygal: no JavaScript, no CDN, readable on a phone.

A chart is a <figure>: its title is page text (a <figcaption>), the chart an `<img>` with a data: URI, so the SVG
cannot run scripts and its labels (tags and project names, which assistants write) are escaped by pygal's XML
writer.

An SVG in an `<img>` scales with the width it is shown at, its text included. So each chart is drawn at about
the width it will be shown at: donuts once (their cards are 280 to 420 px wide on every screen), the timeline
once per screen class in a <picture> (a 900 px drawing shown 340 px wide on a phone had 5 px labels). Each
layout's font size keeps every label at 11 px or more on the screens it is chosen for (the dashboard's browser
test measures it); all labels of a chart have one size, and the grid lines are light and solid."""

from __future__ import annotations

import base64
import functools
import html
import math
from dataclasses import dataclass

import pygal
from markupsafe import Markup
from pygal.style import Style

COLORS = ("#2563eb", "#16a34a", "#ea580c", "#9333ea", "#0891b2", "#ca8a04", "#dc2626", "#4f46e5", "#64748b")
MAX_SLICES = 8
LEGEND_CHARS = 28  # a donut legend line: the name, cut to this, then its count


@dataclass(frozen=True)
class Layout:
    media: str | None  # the <source media> query choosing this drawing; None: the fallback <img>
    width: int
    height: int
    font: int  # every label's size, in SVG units (= px when shown at `width`)
    x_labels: int  # at most this many day labels under the bars


DONUT = Layout(None, 340, 0, 14, 0)  # height: from its legend (_donut)
# shown at 340-560 px (phones), 540-940 px (tablets, narrow windows), 930-1140 px (the desktop's 1200 px column)
BAR_LAYOUTS = (Layout("(max-width: 600px)", 360, 240, 13, 4),
               Layout("(max-width: 1000px)", 720, 280, 15, 8),
               Layout(None, 1100, 300, 14, 12))


def _style(font: int) -> Style:
    return Style(background="transparent", plot_background="transparent", foreground="#334155",
                 foreground_strong="#0f172a", foreground_subtle="#e2e8f0", font_family="system-ui, sans-serif",
                 colors=COLORS, opacity=".9", opacity_hover="1",
                 label_font_size=font, major_label_font_size=font, legend_font_size=font, title_font_size=font,
                 value_font_size=font, value_label_font_size=font, tooltip_font_size=font, no_data_font_size=font,
                 guide_stroke_dasharray="none", major_guide_stroke_dasharray="none",
                 guide_stroke_color="#e2e8f0", major_guide_stroke_color="#e2e8f0")


def chart(kind: str, title: str, mapping: dict) -> Markup:
    """A titled chart of `mapping` (label -> number): kind "donut" (largest first, with counts in the legend)
    or "bars" (in the mapping's order: a timeline)."""
    items = tuple((str(k), float(v)) for k, v in (mapping or {}).items())
    if kind == "donut":
        items = tuple(sorted(items, key=lambda kv: -kv[1]))
    elif kind != "bars":
        raise ValueError(f"unknown chart kind {kind!r} (donut, bars)")
    alt = html.escape(f"{title}: " + ", ".join(f"{k} {v:g}" for k, v in items[:20]), quote=True)
    layouts = (DONUT,) if kind == "donut" else BAR_LAYOUTS
    sources = "".join(f'<source media="{layout.media}" srcset="data:image/svg+xml;base64,{_render(kind, items, layout)}">'
                      for layout in layouts if layout.media)
    fallback = _render(kind, items, layouts[-1])
    return Markup(f'<figure class="chart-figure chart-figure-{kind}"><figcaption>{html.escape(title)}</figcaption>'
                  f'<picture>{sources}<img class="chart chart-{kind}" alt="{alt}" '
                  f'src="data:image/svg+xml;base64,{fallback}"></picture></figure>')


MARGIN = 8
RING = 240  # the donut's own height; its legend adds a line per row below it


@functools.lru_cache(maxsize=256)
def _render(kind: str, items: tuple[tuple[str, float], ...], layout: Layout) -> str:
    chart = _donut(items, layout) if kind == "donut" else _bars(items, layout)
    return base64.b64encode(chart.render()).decode("ascii")


def _config(layout: Layout, **settings) -> pygal.Config:
    return pygal.Config(js=[], style=_style(layout.font), width=layout.width, explicit_size=False,
                        print_values=False, legend_at_bottom=True, truncate_legend=-1, no_data_text="nothing yet",
                        margin=MARGIN, spacing=8, **settings)


def _donut(items, layout: Layout) -> pygal.Pie:
    top, rest = items[:MAX_SLICES], items[MAX_SLICES:]
    slices = [(label, value) for label, value in top]
    if rest:
        slices.append((f"{len(rest)} other" + "s" * (len(rest) > 1), sum(v for _, v in rest)))
    # two legend columns while the names fit in half the width, else one (long tags ran into each other)
    half = (layout.width - 2 * MARGIN) / 2 - layout.font * 1.5
    columns = 2 if all(len(_legend(label, value)) * layout.font * 0.6 <= half for label, value in slices) else 1
    rows = math.ceil(len(slices) / columns)
    line = round(1.5 * layout.font)
    # pygal makes room for len // columns legend rows: an odd count's last row in two columns was cut off
    short = columns == 2 and len(slices) % 2
    chart = pygal.Pie(_config(layout, show_legend=True, legend_at_bottom_columns=columns,
                              height=RING + rows * line + 2 * MARGIN, margin_bottom=MARGIN + (line + 2) * short),
                      inner_radius=0.55)
    for label, value in slices:
        chart.add(_legend(label, value), value)
    return chart


def _bars(items, layout: Layout) -> pygal.Bar:
    chart = pygal.Bar(_config(layout, show_legend=False, height=layout.height,
                              margin_right=MARGIN + 2 * layout.font),  # room for half of today's label
                      x_label_rotation=0, show_minor_x_labels=False, truncate_label=-1, show_x_guides=False,
                      y_labels=_whole_number_ticks(max((v for _, v in items), default=0)),
                      value_formatter=lambda v: f"{v:g}")
    chart.x_labels = [label for label, _ in items]
    step = max(1, math.ceil(len(items) / layout.x_labels))
    chart.x_labels_major = chart.x_labels[::-1][::step]  # counted back from today, which is always labelled
    chart.add("", [value for _, value in items])
    return chart


def _legend(label: str, value: float) -> str:
    name = label if len(label) <= LEGEND_CHARS else label[:LEGEND_CHARS - 1] + "…"
    return f"{name} ({value:g})"


def _whole_number_ticks(top: float) -> list[int]:
    """0 to at least `top` in at most 6 whole-number steps of 1, 2, 5, 10, 20, 50...: counts have no halves."""
    step = 1
    while top / step > 5:
        step = step * 5 // 2 if str(step).startswith("2") else step * 2
    return list(range(0, int(math.ceil(max(top, 1) / step) * step) + 1, step))
