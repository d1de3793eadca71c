"""The chaos run's worker pool against real processes and real signals."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Sequence

import pytest

from orders.chaos.pool import WorkerPool, process_stopped

GRACEFUL = (
    "import signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
    "print('up', flush=True)\n"
    "time.sleep(60)\n"
)
STUBBORN = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('up', flush=True)\n"
    "time.sleep(60)\n"
)


def starter(program: str):
    def start(steps: Sequence[str]) -> subprocess.Popen[bytes]:
        proc = subprocess.Popen(
            [sys.executable, "-c", program], stdout=subprocess.PIPE, start_new_session=True
        )
        assert proc.stdout is not None
        with proc.stdout:  # ready once it has set its signal handler
            assert proc.stdout.readline() == b"up\n"
        return proc

    return start


def poll_until(pool: WorkerPool, predicate, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"pool counts: {dict(pool.stats.counts)}"
        pool.poll()
        time.sleep(0.02)


@pytest.fixture
def pool():
    made: list[WorkerPool] = []

    def make(program: str = GRACEFUL, **kw) -> WorkerPool:
        p = WorkerPool(("stock", "points"), 2, starter(program), rng=random.Random(1), **kw)
        made.append(p)
        return p

    yield make
    for p in made:
        p.stop(timeout=5)


def test_a_sigkilled_worker_is_replaced_for_the_same_step(pool) -> None:
    workers = pool()
    workers.start_all()
    assert sorted(w.steps for w in workers.live()) == [("points",)] * 2 + [("stock",)] * 2

    victim = workers.sigkill_random()

    assert victim is not None
    poll_until(workers, lambda: workers.stats["started"] == 5)
    assert victim.proc.returncode == -signal.SIGKILL
    assert victim.pid not in workers.pids()
    assert sorted(w.steps for w in workers.live()) == [("points",)] * 2 + [("stock",)] * 2
    assert workers.stats["died_unprompted"] == 0


def test_sigterm_prefers_a_worker_holding_a_job_and_counts_its_graceful_exit(pool) -> None:
    workers = pool()
    workers.start_all()
    busy = workers.live()[2]

    victim = workers.sigterm_busy({busy.pid, 999_999})

    assert victim is busy
    poll_until(workers, lambda: workers.stats["graceful_exits"] == 1)
    assert workers.stats["sigterm_mid_job"] == 1
    assert len(workers.live()) == 4


def test_a_worker_that_dies_on_its_own_is_counted_and_replaced(pool) -> None:
    workers = pool()
    workers.start_all()
    os.kill(workers.live()[0].pid, signal.SIGKILL)  # as an injected crash does

    poll_until(workers, lambda: workers.stats["died_unprompted"] == 1)
    assert len(workers.live()) == 4


def test_a_worker_that_ignores_sigterm_is_killed_after_the_grace_period(pool) -> None:
    workers = pool(STUBBORN, term_grace=0.3)
    workers.start_all()

    workers.sigterm_busy(set())

    poll_until(workers, lambda: workers.stats["started"] == 5)
    assert workers.stats["sigterm_overran"] == 1
    assert workers.stats["graceful_exits"] == 0


SELF_STOPPING = (
    "import os, signal, time\n"
    "print('up', flush=True)\n"
    "time.sleep(0.2)\n"
    "os.kill(os.getpid(), signal.SIGSTOP)\n"  # as the injected freeze in a transaction
    "time.sleep(60)\n"
)


def test_a_frozen_worker_is_really_stopped_then_thawed_after_its_freeze(pool) -> None:
    workers = pool(freeze_seconds=0.5)
    workers.start_all()

    victim = workers.freeze_random()

    assert victim is not None
    poll_until(workers, lambda: process_stopped(victim.pid), timeout=5)
    workers.poll()
    assert workers.stats["froze_itself"] == 0  # we froze it: not counted as its own
    assert process_stopped(victim.pid)
    poll_until(workers, lambda: workers.stats["thawed"] == 1)
    poll_until(workers, lambda: not process_stopped(victim.pid), timeout=5)
    assert workers.stats["frozen"] == 1
    assert victim.proc.poll() is None  # alive, and still one of the pool's
    assert len(workers.live()) == 4


def test_a_worker_that_stopped_itself_is_found_and_thawed(pool) -> None:
    workers = pool(SELF_STOPPING, freeze_seconds=0.3)
    workers.start_all()

    poll_until(workers, lambda: workers.stats["froze_itself"] == 4)
    poll_until(workers, lambda: workers.stats["thawed"] == 4)
    for worker in workers.live():
        poll_until(workers, lambda w=worker: not process_stopped(w.pid), timeout=5)
    assert workers.stats["frozen"] == 0


def test_stopping_the_pool_thaws_a_frozen_worker_so_it_exits_gracefully(pool) -> None:
    workers = pool(freeze_seconds=60)
    workers.start_all()
    victim = workers.freeze_random()
    assert victim is not None
    poll_until(workers, lambda: process_stopped(victim.pid), timeout=5)

    started = time.monotonic()
    workers.stop(timeout=5)

    assert victim.proc.returncode == 0  # its SIGTERM handler ran: it was thawed first
    assert time.monotonic() - started < 4
