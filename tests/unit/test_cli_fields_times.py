"""``orders explain`` prints every point in time as a UTC time, never as raw epoch seconds
(its ``queue_time`` printed as ``1.79659e+09``)."""

from __future__ import annotations

import io

from rich.console import Console

from orders.cli.render import fields

QUEUE_TIME = 1_796_590_000.25  # 2026-12-06 (UTC), epoch seconds


def printed(values: dict) -> str:
    out = io.StringIO()
    fields(values, out=Console(file=out, width=200, color_system=None))
    return out.getvalue()


def test_the_queue_time_of_an_explanation_prints_as_a_utc_time() -> None:
    text = printed({"queue_time": QUEUE_TIME, "enqueued_at": QUEUE_TIME - 5, "attempts": 2})
    assert "e+09" not in text and "1796590000" not in text
    assert text.count("2026-12-") == 2
    assert "attempts: 2" in text


def test_a_float_that_is_no_time_keeps_its_number() -> None:
    assert "clock offset: 0.25" in printed({"clock_offset": 0.25})
