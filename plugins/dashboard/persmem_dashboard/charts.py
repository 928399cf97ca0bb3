"""Charts as SVG images, rendered on the server with pygal: no JavaScript, no CDN, readable on a phone.

A chart is an `<img>` with a data: URI, so the SVG cannot run scripts and its labels (tags and project
names, which assistants write) are escaped by pygal's XML writer."""

from __future__ import annotations

import base64
import functools
import html

import pygal
from markupsafe import Markup
from pygal.style import Style

STYLE = Style(background="transparent", plot_background="transparent", foreground="#334155",
              foreground_strong="#0f172a", foreground_subtle="#94a3b8", font_family="system-ui, sans-serif",
              colors=("#2563eb", "#16a34a", "#ea580c", "#9333ea", "#0891b2", "#ca8a04", "#dc2626", "#4f46e5",
                      "#64748b"), legend_font_size=15, label_font_size=13, title_font_size=19)
MAX_SLICES = 8


def chart(kind: str, title: str, mapping: dict) -> Markup:
    items = tuple(sorted(((str(k), float(v)) for k, v in (mapping or {}).items()), key=lambda kv: -kv[1]))
    if kind == "bars":  # keep the caller's order (a timeline)
        items = tuple((str(k), float(v)) for k, v in (mapping or {}).items())
    svg = _render(kind, title, items)
    alt = html.escape(f"{title}: " + ", ".join(f"{k} {v:g}" for k, v in items[:20]), quote=True)
    return Markup(f'<img class="chart chart-{kind}" alt="{alt}" title="{html.escape(title, quote=True)}" '
                  f'src="data:image/svg+xml;base64,{svg}">')


@functools.lru_cache(maxsize=256)
def _render(kind: str, title: str, items: tuple[tuple[str, float], ...]) -> str:
    width, height = (900, 300) if kind == "bars" else (380, 360)
    config = pygal.Config(js=[], style=STYLE, title=title, width=width, height=height, explicit_size=False,
                          disable_xml_declaration=False, print_values=False, show_legend=kind == "donut",
                          legend_at_bottom=True, legend_at_bottom_columns=2, truncate_legend=28,
                          no_data_text="nothing yet")
    if kind == "donut":
        chart = pygal.Pie(config, inner_radius=0.55)
        top, rest = items[:MAX_SLICES], items[MAX_SLICES:]
        for label, value in top:
            chart.add(label, value)
        if rest:
            chart.add(f"{len(rest)} others", sum(v for _, v in rest))
    elif kind == "bars":
        chart = pygal.Bar(config, x_label_rotation=-45, show_minor_x_labels=False, truncate_label=10)
        chart.x_labels = [label for label, _ in items]
        chart.x_labels_major_every = max(1, len(items) // 8)
        chart.add(title, [value for _, value in items])
    else:
        raise ValueError(f"unknown chart kind {kind!r} (donut, bars)")
    return base64.b64encode(chart.render()).decode("ascii")
