"""The benchmark harness's pure parts: turn order, medians with min and max, ratios."""

from __future__ import annotations

import itertools

import pytest

from benchmarks.harness import (
    group_runs,
    interleaved,
    ratio_of_medians,
    spread,
    summarize,
    take_turns,
)


def test_turns_alternate_forward_and_reversed_rounds() -> None:
    order = interleaved(["a", "b", "c"], 3)

    assert [name for _, name in order] == ["a", "b", "c", "c", "b", "a", "a", "b", "c"]
    assert [r for r, _ in order] == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_every_contender_takes_one_turn_per_round() -> None:
    order = interleaved(["x", "y"], 4)

    assert sorted(name for _, name in order) == ["x"] * 4 + ["y"] * 4


def test_no_rounds_is_refused() -> None:
    with pytest.raises(ValueError, match="runs must be >= 1"):
        interleaved(["a"], 0)


def test_spread_is_median_min_and_max_in_run_order() -> None:
    odd = spread([30.0, 10.0, 20.0])
    even = spread([4.0, 1.0, 3.0, 2.0])

    assert (odd.median, odd.low, odd.high, odd.runs) == (20.0, 10.0, 30.0, (30.0, 10.0, 20.0))
    assert even.median == 2.5
    with pytest.raises(ValueError):
        spread([])


def test_summary_ratio_is_the_ratio_of_medians_not_of_bests() -> None:
    # best-of would say 100 / 50 = 2.0; the medians say 60 / 40 = 1.5
    assert ratio_of_medians([100.0, 60.0, 10.0], [50.0, 40.0, 30.0]) == 1.5
    assert ratio_of_medians([1.0], []) is None
    assert ratio_of_medians([1.0], [0.0, 0.0, 5.0]) is None


def test_summarize_keeps_median_min_max_runs_and_load_of_every_run() -> None:
    runs = [
        {"library": "x", "rate": 10.0, "done": True, "loadavg_1m_before": 0.5,
         "loadavg_1m_after": 0.7},
        {"library": "x", "rate": 30.0, "done": True, "loadavg_1m_before": 0.7,
         "loadavg_1m_after": 1.9},
        {"library": "x", "rate": 20.0, "done": False, "loadavg_1m_before": 1.9,
         "loadavg_1m_after": 1.1},
    ]  # fmt: skip

    row = summarize(runs, ["rate", "done"])

    assert (row["rate"], row["rate_min"], row["rate_max"]) == (20.0, 10.0, 30.0)
    assert row["rate_runs"] == [10.0, 30.0, 20.0]
    assert row["done"] is False
    assert row["runs"] == 3
    assert row["loadavg_1m_runs"] == [[0.5, 0.7], [0.7, 1.9], [1.9, 1.1]]
    assert (row["loadavg_1m_before"], row["loadavg_1m_after"]) == (0.5, 1.1)
    assert row["library"] == "x"


def test_summarize_leaves_out_runs_without_the_figure() -> None:
    row = summarize([{"p99": None}, {"p99": 4.0}, {"p99": 2.0}], ["p99"])
    empty = summarize([{"p99": None}], ["p99"])

    assert (row["p99"], row["p99_min"], row["p99_max"]) == (3.0, 2.0, 4.0)
    assert row["p99_runs"] == [None, 4.0, 2.0]
    assert empty["p99"] is None


def test_runs_are_grouped_by_key_in_order_of_first_run() -> None:
    rows = [{"lib": "b", "n": 1}, {"lib": "a", "n": 2}, {"lib": "b", "n": 3}]

    groups = group_runs(rows, ["lib"])

    assert list(groups) == [("b",), ("a",)]
    assert [r["n"] for r in groups[("b",)]] == [1, 3]


def test_every_turn_is_stamped_with_the_load_around_it() -> None:
    loads = itertools.count(1.0)
    called: list[tuple[str, int]] = []

    def turn(name: str, round_index: int) -> str:
        called.append((name, round_index))
        return name.upper()

    turns = take_turns(["a", "b"], 2, turn, loadavg=lambda: (next(loads), 0.0, 0.0))

    assert called == [("a", 0), ("b", 0), ("b", 1), ("a", 1)]
    assert [(t.result, t.loadavg_before, t.loadavg_after) for t in turns] == [
        ("A", 1.0, 2.0),
        ("B", 3.0, 4.0),
        ("B", 5.0, 6.0),
        ("A", 7.0, 8.0),
    ]
    assert turns[2].stamp({"x": 1}) == {
        "x": 1,
        "round": 1,
        "loadavg_1m_before": 5.0,
        "loadavg_1m_after": 6.0,
    }
    assert turns[0].stamp({"loadavg_1m_before": 0.1})["loadavg_1m_before"] == 0.1
