"""The soak's verdict: growth past the documented bounds is caught, steady use is not."""

from __future__ import annotations

from benchmarks.soak_bounds import RSS_SLACK_MB, Sample, judge


def samples(rss: list[float], fds: list[int], redis_mb: list[float]) -> list[Sample]:
    return [
        Sample(60.0 * i, {"stock": (r, f)}, m)
        for i, (r, f, m) in enumerate(zip(rss, fds, redis_mb, strict=True))
    ]


def test_steady_memory_and_files_are_within_the_bounds() -> None:
    verdict = judge(samples([90, 100, 104, 101], [20, 24, 25, 24], [5, 40, 44, 41]), 60.0)

    assert verdict.within is True
    assert len(verdict.lines) == 3


def test_a_worker_leaking_memory_is_over_the_bound() -> None:
    rss = [100.0, 100.0, 100.0 + RSS_SLACK_MB, 130.0]

    verdict = judge(samples(rss, [20] * 4, [40] * 4), 60.0)

    assert verdict.within is False
    assert any("stock RSS" in line and "OVER" in line for line in verdict.lines)


def test_leaked_file_descriptors_and_redis_growth_are_over_the_bound() -> None:
    verdict = judge(samples([100] * 4, [20, 20, 25, 40], [40, 40, 60, 90]), 60.0)

    over = [line for line in verdict.lines if "OVER" in line]
    assert verdict.within is False
    assert len(over) == 2
    assert any("open files" in line for line in over)
    assert any("Redis" in line for line in over)


def test_growth_before_the_steady_state_does_not_count() -> None:
    # records pile up until the retention window is full, then stay flat
    verdict = judge(samples([50, 80, 100, 100], [10, 20, 24, 24], [1, 30, 60, 61]), 120.0)

    assert verdict.within is True


def test_a_soak_too_short_to_reach_its_steady_state_decides_nothing() -> None:
    verdict = judge(samples([100, 200], [20, 90], [40, 400]), 60.0)

    assert verdict.within is None
    assert "too short" in verdict.lines[0]


def test_a_worker_gone_by_the_end_is_over_the_bound() -> None:
    steady = samples([100, 100, 100], [20, 20, 20], [40, 40, 40])
    last = Sample(180.0, {}, 40.0)

    verdict = judge([*steady, last], 60.0)

    assert verdict.within is False
    assert any("gone" in line for line in verdict.lines)
