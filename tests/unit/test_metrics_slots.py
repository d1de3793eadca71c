"""Worker processes write metrics to per-slot files, and a restarted one reuses a slot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from orders.observability.multiproc import claim_slot, live_slots
from orders.observability.worker_files import WorkerFiles


def test_running_processes_hold_distinct_slots_and_a_freed_slot_is_reused(
    tmp_path: Path,
) -> None:
    first, first_lock = claim_slot(tmp_path)
    second, second_lock = claim_slot(tmp_path)
    assert (first, second) == ("slot0", "slot1")
    first_lock.close()  # the process holding slot 0 exited
    again, again_lock = claim_slot(tmp_path)
    assert again == "slot0"
    second_lock.close()
    again_lock.close()


RECORD = """
import sys, time
from pathlib import Path
from orders.observability.multiproc import enable_multiprocess
enable_multiprocess(Path(sys.argv[1]))
from prometheus_client import Counter, Gauge
Counter("orderflow_test_runs", "runs", registry=None).inc()
Gauge("orderflow_worker_processes", "up", multiprocess_mode="livesum", registry=None).set(1)
if sys.argv[2] == "stay":
    print("ready", flush=True)
    sys.stdin.read()
"""


def _record(path: Path, stay: bool) -> subprocess.Popen[str] | None:
    """A process that records a counter and a live gauge, then exits or stays (until
    its stdin closes)."""
    argv = [sys.executable, "-c", RECORD, str(path), "stay" if stay else "exit"]
    if not stay:
        subprocess.run(argv, check=True, timeout=30)
        return None
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
    return proc


def _samples(path: Path) -> dict[str, float]:
    return {s.name: s.value for family in WorkerFiles(path).collect() for s in family.samples}


@pytest.mark.slow  # two Python processes start
def test_gauges_count_only_running_processes_and_counters_every_one(tmp_path: Path) -> None:
    assert _samples(tmp_path) == {"orderflow_worker_processes": 0.0}
    _record(tmp_path, stay=False)  # ran and exited (as after kill -9: its files stay)
    running = _record(tmp_path, stay=True)
    assert running is not None
    try:
        assert live_slots(tmp_path) == {"slot0"}  # the exited one's slot was taken again
        assert _samples(tmp_path) == {
            "orderflow_test_runs_total": 2.0,
            "orderflow_worker_processes": 1.0,
        }
    finally:
        running.communicate("", timeout=30)
    assert live_slots(tmp_path) == set()
    assert _samples(tmp_path) == {
        "orderflow_test_runs_total": 2.0,
        "orderflow_worker_processes": 0.0,
    }
