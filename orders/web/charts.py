"""Server-rendered SVG charts (no JavaScript, no external assets)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from markupsafe import Markup, escape

PALETTE = (
    "#2563eb",  # blue
    "#16a34a",  # green
    "#d97706",  # amber
    "#dc2626",  # red
    "#7c3aed",  # violet
    "#0891b2",  # cyan
    "#db2777",  # pink
    "#65a30d",  # lime
    "#475569",  # slate
    "#a16207",  # brown
)
"""One colour per series: ten, more than the seven step queues a chart draws. A chart
of more series repeats them with a dash pattern (:func:`series_style`), so no two
series look the same."""

DASHES = ("", "6 3", "2 2")
"""Stroke dash patterns of the series past each round of :data:`PALETTE`."""

LEGEND_CHAR_PX = 7
"""Width of one legend character (11 px system-ui), pixels: an estimate, on the wide side."""

LEGEND_ROW_PX = 14
"""Height of one row of the legend, pixels."""


def series_style(index: int) -> tuple[str, str]:
    """``(colour, dash pattern)`` of the ``index``-th series (0-based): distinct for the
    first ``len(PALETTE) * len(DASHES)`` series."""
    colour = PALETTE[index % len(PALETTE)]
    dash = DASHES[(index // len(PALETTE)) % len(DASHES)]
    return colour, dash


def legend_layout(names: Sequence[str], left: int, right_edge: int) -> list[tuple[int, int]]:
    """Where each legend entry goes: ``(x, row)`` from ``left``, wrapping before
    ``right_edge`` (pixels), rows from 0. Entries never overlap, and the legend has rows of
    its own below the title (the chart grows by its rows)."""
    out: list[tuple[int, int]] = []
    x, row = left, 0
    for name in names:
        width = 17 + LEGEND_CHAR_PX * len(name)
        if x > left and x + width > right_edge:
            x, row = left, row + 1
        out.append((x, row))
        x += width + 12
    return out


def nice_ceiling(value: float) -> float:
    """The smallest of 1, 2, 2.5, 5 x 10^k that is >= ``value`` (1 for value <= 0)."""
    if value <= 0:
        return 1.0
    exp = math.floor(math.log10(value))
    for step in (1, 2, 2.5, 5, 10):
        candidate = step * 10**exp
        if candidate >= value:
            return float(candidate)
    return float(10 ** (exp + 1))


def span_label(seconds: float) -> str:
    """``-90 s`` under two minutes, else ``-N min`` (the left end of a time axis)."""
    if seconds < 120:
        return f"-{seconds:.0f} s"
    return f"-{seconds / 60:.0f} min"


def _fmt(value: float) -> str:
    return f"{value:g}" if value < 1000 else f"{value / 1000:g}k"


def line_chart(
    series: Mapping[str, Sequence[tuple[float, float]]],
    *,
    title: str,
    unit: str,
    width: int = 600,
    height: int = 200,
    span_seconds: float | None = None,
) -> Markup:
    """An SVG line chart of several series sharing one time axis.

    The title is the first line; the legend (one colour, and past ten series a dash
    pattern, per series: :func:`series_style`) takes the rows below it, wrapped to the
    width, and the plot starts under the legend.

    Args:
        series: name -> ``(epoch seconds, value)`` points, oldest first.
        title: shown above the plot (also the accessible name).
        unit: label of the y axis (e.g. ``jobs/s``).
        width / height: size in CSS pixels, without the legend's rows (the chart is
            ``LEGEND_ROW_PX`` taller per row).
        span_seconds: width of the time axis; default the data's own span.

    Returns:
        Safe markup (every text is escaped).
    """
    left, right, bottom = 48, 12, 22
    names = list(series)
    places = legend_layout(names, left, width - right)
    rows = (places[-1][1] + 1) if places else 0
    top = 28 + rows * LEGEND_ROW_PX
    plot_w, plot_h = width - left - right, height - 28 - bottom
    height = height + rows * LEGEND_ROW_PX
    points = [p for pts in series.values() for p in pts]
    t_max = max((t for t, _ in points), default=0.0)
    span = span_seconds or (t_max - min((t for t, _ in points), default=t_max)) or 60.0
    t_min = t_max - span
    y_max = nice_ceiling(max((v for _, v in points), default=0.0))

    def x(t: float) -> float:
        return left + plot_w * (t - t_min) / span

    def y(v: float) -> float:
        return top + plot_h * (1 - v / y_max)

    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" '
        f'width="{width}" height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<text x="{left}" y="16" class="chart-title">{escape(title)}</text>',
    ]
    for i in range(5):
        v = y_max * i / 4
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y(v):.1f}" y2="{y(v):.1f}" '
            'class="grid"/>'
            f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" class="tick">'
            f"{_fmt(v)}</text>"
        )
    parts.append(
        f'<text x="{left}" y="{height - 6}" class="tick">{span_label(span)}</text>'
        f'<text x="{width - right}" y="{height - 6}" text-anchor="end" class="tick">now</text>'
        f'<text x="{left + plot_w / 2:.0f}" y="{height - 6}" text-anchor="middle" class="tick">'
        f"{escape(unit)}</text>"
    )
    for i, ((name, pts), (legend_x, row)) in enumerate(zip(series.items(), places, strict=True)):
        color, dash = series_style(i)
        dashed = f' stroke-dasharray="{dash}"' if dash else ""
        visible = [(t, v) for t, v in pts if t >= t_min]
        if len(visible) >= 2:
            path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in visible)
            parts.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="2"{dashed} '
                f'points="{path}"><title>{escape(name)}</title></polyline>'
            )
        baseline = 16 + (row + 1) * LEGEND_ROW_PX
        parts.append(
            f'<line x1="{legend_x}" x2="{legend_x + 14}" y1="{baseline - 4}" '
            f'y2="{baseline - 4}" stroke="{color}" stroke-width="3"{dashed} class="key"/>'
            f'<text x="{legend_x + 17}" y="{baseline}" class="legend">{escape(name)}</text>'
        )
    parts.append("</svg>")
    return Markup("".join(parts))
