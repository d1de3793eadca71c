"""The dashboard's SVG charts (pure)."""

from __future__ import annotations

import re

from orders.domain.steps import ALL_STEPS
from orders.web.charts import LEGEND_CHAR_PX, line_chart, nice_ceiling, span_label


def test_the_chart_escapes_names_and_scales_to_a_round_maximum() -> None:
    assert [nice_ceiling(v) for v in (0, 0.3, 7, 12, 26, 900)] == [1, 0.5, 10, 20, 50, 1000]
    svg = line_chart(
        {"<b>": [(0.0, 1.0), (10.0, 3.0)], "stock": [(0.0, 2.0), (10.0, 2.0)]},
        title="a & b",
        unit="jobs/s",
    )
    assert svg.startswith("<svg") and "<b>" not in svg and "&lt;b&gt;" in svg
    assert "a &amp; b" in svg and svg.count("<polyline") == 2


def test_the_time_axis_is_labelled_in_seconds_then_minutes() -> None:
    assert [span_label(s) for s in (60, 119, 120, 600)] == ["-60 s", "-119 s", "-2 min", "-10 min"]


def _attributes(svg: str, tag: str, cls: str) -> list[dict[str, str]]:
    """The attributes of every ``<tag ... class="cls">`` element of ``svg``."""
    found = []
    for element in re.findall(rf"<{tag} ([^>]*)>", svg):
        attrs = dict(re.findall(r'([\w-]+)="([^"]*)"', element))
        if attrs.get("class") == cls:
            found.append(attrs)
    return found


def test_every_queue_of_a_chart_has_its_own_colour() -> None:
    series = {step: [(0.0, float(i)), (10.0, float(i + 1))] for i, step in enumerate(ALL_STEPS)}

    svg = line_chart(series, title="jobs done per second", unit="jobs/s")

    lines = re.findall(r'<polyline fill="none" stroke="(#[0-9a-f]{6})"([^>]*)>', svg)
    assert len(lines) == len(ALL_STEPS) == 7
    assert len({colour + rest.split("points")[0] for colour, rest in lines}) == 7
    keys = [(k["stroke"], k.get("stroke-dasharray", "")) for k in _attributes(svg, "line", "key")]
    assert len(set(keys)) == 7  # the legend tells them apart too
    many = line_chart({f"q{i}": [] for i in range(25)}, title="t", unit="u")
    styles = [
        (k["stroke"], k.get("stroke-dasharray", "")) for k in _attributes(many, "line", "key")
    ]
    assert len(set(styles)) == 25  # past the palette, dash patterns keep them apart


def test_the_legend_sits_below_the_title_and_above_the_plot_without_overlapping() -> None:
    series = {step: [(0.0, 1.0), (10.0, 2.0)] for step in ALL_STEPS}

    svg = line_chart(series, title="jobs queued or running", unit="jobs", width=600)

    (title,) = _attributes(svg, "text", "chart-title")
    labels = _attributes(svg, "text", "legend")
    assert len(labels) == 7
    assert all(float(label["y"]) >= float(title["y"]) + 12 for label in labels)  # a row below
    grid_top = min(float(g["y1"]) for g in _attributes(svg, "line", "grid"))
    assert max(float(label["y"]) for label in labels) + 4 <= grid_top  # the plot is below
    boxes = []  # each entry's key and text, on the estimate the layout uses
    for key, label in zip(_attributes(svg, "line", "key"), labels, strict=True):
        text = re.search(rf'x="{label["x"]}" y="{label["y"]}" class="legend">([^<]*)<', svg)
        assert text is not None
        right = float(label["x"]) + LEGEND_CHAR_PX * len(text.group(1))
        boxes.append((float(label["y"]), float(key["x1"]), right))
        assert right <= 600
    for row in {y for y, _, _ in boxes}:
        spans = sorted((x0, x1) for y, x0, x1 in boxes if y == row)
        assert all(a[1] < b[0] for a, b in zip(spans, spans[1:], strict=False))
