"""The dashboard's SVG charts (pure)."""

from __future__ import annotations

from orders.web.charts import line_chart, nice_ceiling, span_label


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
