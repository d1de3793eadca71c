"""The latency runs' second CPU-bound process (``peers --cpu-hog``): it spins for the
length of the window, real process and all, and is never left behind."""

from __future__ import annotations

import os
import time

import pytest

from benchmarks.cpu_hog import cpu_hog, share_of_a_core
from benchmarks.markdown import latency_markdown
from benchmarks.measure import process_cpu_seconds


def _state(pid: int) -> str | None:
    """The process's state letter (``R``, ``S``, ``Z`` ...), None once it is reaped."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(b")") + 2 :].split()[0].decode()


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_the_hog_burns_cpu_during_the_window_and_is_gone_after_it() -> None:
    with cpu_hog(60.0) as hog:
        pid = hog.pid
        first = hog.cpu_seconds()
        assert first is not None
        deadline = time.monotonic() + 20
        used = 0.0
        while used < 0.3 and time.monotonic() < deadline:
            time.sleep(0.05)
            used = (hog.cpu_seconds() or 0.0) - first
        assert used >= 0.3  # it spins: a third of a CPU second, even on a busy machine
        assert _state(pid) in ("R", "S")

    assert _gone(pid) and _state(pid) is None
    assert process_cpu_seconds(pid) is None


def test_a_window_that_fails_leaves_no_hog_behind() -> None:
    with pytest.raises(RuntimeError, match="the run broke"), cpu_hog(60.0) as hog:
        pid = hog.pid
        raise RuntimeError("the run broke")

    assert _gone(pid)


def test_the_hog_stops_by_itself_at_its_bound() -> None:
    with cpu_hog(0.3) as hog:
        deadline = time.monotonic() + 20
        while _state(hog.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(hog.pid) == "Z"  # exited, not yet reaped: nobody killed it
    assert _gone(hog.pid)


def test_a_bound_of_zero_is_refused() -> None:
    with pytest.raises(ValueError, match="above 0"), cpu_hog(0.0):
        pass


def test_share_of_a_core_over_a_window() -> None:
    assert share_of_a_core(2.0, 11.9, 10.0) == 0.99
    assert share_of_a_core(None, 3.0, 10.0) == 0.0
    assert share_of_a_core(1.0, 3.0, 0.0) == 0.0


def test_latency_markdown_says_a_hog_ran_and_shows_every_run() -> None:
    row = {
        "kind": "latency",
        "library": "orderflow",
        "offered_rate": 1000.0,
        "runs": 2,
        "n": 10000,
        "n_min": 10000,
        "n_max": 10000,
        "p50_ms": 1.0,
        "p95_ms": 2.0,
        "p99_ms": 3.5,
        "p99_ms_min": 3.0,
        "p99_ms_max": 4.0,
        "p99_ms_runs": [3.0, 4.0],
        "max_ms": 15.0,
        "max_ms_min": 10.0,
        "max_ms_max": 20.0,
        "max_ms_runs": [10.0, 20.0],
        "cpu_hog": True,
        "cpu_hog_cores": 0.97,
        "cpu_hog_cores_min": 0.95,
        "cpu_hog_cores_max": 0.99,
        "loadavg_1m_runs": [[1.0, 2.0], [2.0, 2.5]],
    }
    quiet = {**row, "cpu_hog": False, "cpu_hog_cores": None}

    loud, calm = latency_markdown([row]), latency_markdown([quiet])

    assert "| yes, 0.97 (0.95-0.99) |" in loud
    assert "| 3.00 / 4.00 | 10.00 / 20.00 |" in loud
    assert "| no |" in calm
