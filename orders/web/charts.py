"""Server-rendered SVG charts (no JavaScript, no external assets)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from markupsafe import Markup, escape

PALETTE = ("#2563eb", "#16a34a", "#d97706", "#dc2626", "#7c3aed", "#0891b2")


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

    Args:
        series: name -> ``(epoch seconds, value)`` points, oldest first.
        title: shown above the plot (also the accessible name).
        unit: label of the y axis (e.g. ``jobs/s``).
        width / height: size in CSS pixels.
        span_seconds: width of the time axis; default the data's own span.

    Returns:
        Safe markup (every text is escaped).
    """
    left, right, top, bottom = 48, 12, 28, 22
    plot_w, plot_h = width - left - right, height - top - bottom
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
    legend_x = width - right
    for i, (name, pts) in enumerate(reversed(list(series.items()))):
        color = PALETTE[(len(series) - 1 - i) % len(PALETTE)]
        visible = [(t, v) for t, v in pts if t >= t_min]
        if len(visible) >= 2:
            path = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in visible)
            parts.append(
                f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{path}">'
                f"<title>{escape(name)}</title></polyline>"
            )
        label = escape(name)
        legend_x -= 10 + 7 * len(name)
        parts.append(
            f'<rect x="{legend_x}" y="8" width="8" height="8" fill="{color}"/>'
            f'<text x="{legend_x + 11}" y="16" class="legend">{label}</text>'
        )
        legend_x -= 12
    parts.append("</svg>")
    return Markup("".join(parts))
