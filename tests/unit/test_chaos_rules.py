"""The pure rules of a chaos run: schedules, pacing, options, verdicts, AOF cuts."""

from __future__ import annotations

from pathlib import Path

import pytest

from orders.chaos.actions import PauseWindow
from orders.chaos.driver import Periodic, due_orders
from orders.chaos.journal import Journal
from orders.chaos.observe import lost_increments
from orders.chaos.poison import POISON_KEY, PoisonOutcome
from orders.chaos.pool import lease_holder_pid
from orders.chaos.redis_crash import AofHistory, aof_tail
from orders.chaos.report import (
    HANG_TIMED_OUT,
    NO_ORPHAN_LEASE,
    POISON_ISOLATED,
    QUEUE_DRAINED,
    FaultTally,
    QueueSnapshot,
    isolation_findings,
    missing_faults,
    queue_findings,
)
from orders.chaos.setup import ChaosOptions, handler_faults, worker_env
from orders.chaos.summary import (
    RunFacts,
    fault_tallies,
    handler_runs,
    restored_increments,
    starts_while_paused,
)


def test_a_schedule_fires_half_a_period_in_then_every_period() -> None:
    schedule = Periodic(4.0, start=100.0)
    fired = [t for t in (100.0, 101.9, 102.0, 103.0, 105.9, 106.0, 110.0) if schedule.due(t)]
    assert fired == [102.0, 106.0, 110.0]


def test_a_schedule_does_not_make_up_missed_firings() -> None:
    schedule = Periodic(1.0, start=0.0)
    assert schedule.due(10.0)
    assert not schedule.due(10.2)
    assert schedule.due(10.5)


def test_a_zero_period_never_fires() -> None:
    schedule = Periodic(0.0, start=0.0)
    assert not any(schedule.due(t) for t in (0.0, 1.0, 1e9))


def test_orders_are_paced_at_the_rate_with_the_first_at_once() -> None:
    assert due_orders(0, 100, rate=10.0, elapsed=0.0) == 1
    assert due_orders(1, 100, rate=10.0, elapsed=0.05) == 0
    assert due_orders(1, 100, rate=10.0, elapsed=1.0) == 10
    assert due_orders(11, 100, rate=10.0, elapsed=60.0) == 89  # caught up, capped at the total


def test_drained_queues_with_matching_leases_pass() -> None:
    assert queue_findings([QueueSnapshot("stock", 0, 0, 0, 0, dead=3)]) == []


def test_jobs_left_behind_and_orphaned_leases_are_findings() -> None:
    found = queue_findings(
        [
            QueueSnapshot("stock", ready=2, delayed=0, active=1, leases=1),
            QueueSnapshot("points", ready=0, delayed=0, active=0, leases=1),
        ]
    )
    assert [(f.invariant, f.queue) for f in found] == [
        (QUEUE_DRAINED, "stock"),
        (NO_ORPHAN_LEASE, "points"),
    ]
    assert str(found[0]) == "queue_drained: queue stock: jobs left: 2 ready, 1 active"


def test_an_enabled_fault_that_never_happened_is_a_finding() -> None:
    tallies = [
        FaultTally("worker_sigkill", True, "every 4s", 3),
        FaultTally("replay", True, "5 every 2s", 0),
        FaultTally("slow_handler", False, "-", 0),
        FaultTally("redis_sigkill", True, "every 15s", 0, skipped="external Redis"),
    ]
    found = missing_faults(tallies)
    assert [f.detail for f in found] == ["replay was enabled (5 every 2s) but never happened"]


def test_the_worker_pid_is_read_from_a_lease_token() -> None:
    assert lease_holder_pid("17:vm:4242:beef") == 4242
    assert lease_holder_pid("17:-") is None


def test_handler_faults_go_to_the_chosen_steps_only() -> None:
    options = ChaosOptions(
        fail_rate=0.3,
        fail_steps=("notification",),
        slow_rate=0.1,
        slow_ms=3000,
        slow_steps=("points",),
        crash_once_step="logistics",
        poison_step=None,
        hang_step=None,
        freeze_in_tx_rate=0.02,
        freeze_steps=("points",),
    )
    faults = handler_faults(options)
    assert set(faults) == {"notification", "points", "logistics"}
    assert faults["points"].freeze_in_tx_rate == 0.02
    assert not faults["notification"].freeze_in_tx_rate
    assert faults["notification"].fail_rate == 0.3 and not faults["notification"].slow_rate
    assert (faults["points"].slow_rate, faults["points"].slow_ms) == (0.1, 3000)
    assert faults["logistics"].crash_once and not faults["logistics"].fail_rate


def test_no_handler_faults_when_all_are_off() -> None:
    options = ChaosOptions(
        fail_rate=0,
        slow_rate=0,
        crash_once_step=None,
        poison_step=None,
        hang_step=None,
        freeze_in_tx_rate=0,
    )
    assert handler_faults(options) == {}


def test_a_freeze_must_outlast_the_lease() -> None:
    assert ChaosOptions(lease_seconds=2.0).effective_freeze_seconds == 5.0
    with pytest.raises(ValueError, match="outlast the lease"):
        ChaosOptions(lease_seconds=2.0, freeze_seconds=2.0)
    with pytest.raises(ValueError, match="unknown step"):
        ChaosOptions(freeze_steps=("nope",))


@pytest.mark.parametrize(
    "bad",
    [{"fail_steps": ("shipping",)}, {"appendfsync": "no"}, {"crash_once_step": "x"}, {"rate": 0}],
)
def test_bad_options_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError):
        ChaosOptions(**bad)


def test_everysec_loses_a_second_by_default_and_always_nothing() -> None:
    assert ChaosOptions(appendfsync="everysec").effective_lose_window == 1.0
    assert ChaosOptions(appendfsync="always").effective_lose_window == 0.0
    assert ChaosOptions(appendfsync="always", lose_window=0.5).effective_lose_window == 0.5


def test_workers_get_explicit_urls_a_short_lease_and_a_fast_sweep(tmp_path: Path) -> None:
    env = worker_env(
        {"PATH": "/bin", "ORDERS_QUEUE_PREFIX": "p"},
        data_dir=tmp_path,
        redis_url="unix:///x.sock",
        database_url="sqlite:///x.db",
        options=ChaosOptions(lease_seconds=2.0, republish_after=5.0),
    )
    assert env["PATH"] == "/bin" and env["ORDERS_QUEUE_PREFIX"] == "p"
    assert env["ORDERS_REDIS_URL"] == "unix:///x.sock"
    assert env["ORDERS_DATABASE_URL"] == "sqlite:///x.db"
    assert env["ORDERS_LEASE_SECONDS"] == "2.0"
    assert env["ORDERS_RELAY_REPUBLISH_AFTER_SECONDS"] == "5.0"


def test_the_aof_tail_is_the_last_incremental_file_of_the_manifest(tmp_path: Path) -> None:
    folder = tmp_path / "appendonlydir"
    folder.mkdir()
    for name in (
        "appendonly.aof.1.base.rdb",
        "appendonly.aof.1.incr.aof",
        "appendonly.aof.2.incr.aof",
    ):
        (folder / name).write_bytes(b"")
    (folder / "appendonly.aof.manifest").write_text(
        "file appendonly.aof.1.base.rdb seq 1 type b\n"
        "file appendonly.aof.1.incr.aof seq 1 type h\n"
        "file appendonly.aof.2.incr.aof seq 2 type i\n"
    )
    assert aof_tail(tmp_path) == folder / "appendonly.aof.2.incr.aof"


def test_a_single_file_aof_is_its_own_tail(tmp_path: Path) -> None:
    assert aof_tail(tmp_path) is None
    (tmp_path / "appendonly.aof").write_bytes(b"*1\r\n")
    assert aof_tail(tmp_path) == tmp_path / "appendonly.aof"


def test_the_aof_is_cut_back_to_its_size_a_window_before_the_crash(tmp_path: Path) -> None:
    aof = tmp_path / "appendonly.aof"
    now = [0.0]
    history = AofHistory(tmp_path, clock=lambda: now[0])
    for t, size in ((0.0, 100), (0.5, 200), (1.0, 300), (1.5, 400)):
        now[0] = t
        aof.write_bytes(b"x" * size)
        history.sample()

    dropped = history.cut(at=1.6, window=1.0)

    assert dropped == 200  # back to the 200 bytes it had at t=0.5 <= 0.6
    assert aof.stat().st_size == 200


def test_nothing_is_cut_without_a_sample_old_enough(tmp_path: Path) -> None:
    aof = tmp_path / "appendonly.aof"
    aof.write_bytes(b"x" * 50)
    history = AofHistory(tmp_path, clock=lambda: 10.0)
    history.sample()
    assert history.cut(at=10.5, window=1.0) == 0
    assert aof.stat().st_size == 50


def test_counts_a_redis_crash_took_back_are_the_ones_that_went_down() -> None:
    before = {"app": {"duplicate:stock": 10, "applied:stock": 50}, "stock": {"retried": 4}}
    after = {"app": {"duplicate:stock": 7, "applied:stock": 50}, "stock": {}}
    assert lost_increments(before, after) == {
        "app": {"duplicate:stock": 3},
        "stock": {"retried": 4},
    }


def test_restored_increments_sum_one_queue_counter_over_the_queues_only() -> None:
    lost = {
        "app": {"dead:worker_lost": 5},  # shared counters: not a queue's
        "notification": {"dead:worker_lost": 1, "reaped": 3},
        "points": {"dead:worker_lost": 1},
        "stock": {"retried": 2},
    }
    assert restored_increments(lost, "dead:worker_lost") == 2
    assert restored_increments({}, "dead:worker_lost") == 0


def test_fault_tallies_count_the_driver_and_the_workers_and_skip_what_is_impossible() -> None:
    options = ChaosOptions(kill_every=4, redis_kill_every=15, crash_once_step="logistics")
    facts = RunFacts(
        first_order_id=1, replayed=9, workers={"sigkill_sent": 3, "died_unprompted": 1}
    )
    counters = {"injected:fail:notification": 40, "injected:slow:points": 2}

    tallies = {t.kind: t for t in fault_tallies(options, facts, counters)}
    poisoned = fault_tallies(
        options,
        RunFacts(first_order_id=1, workers={"died_unprompted": 5}),
        {"injected:poison:notification": 4, "injected:hang:stock": 2},
    )

    assert tallies["worker_sigkill"].count == 3
    assert tallies["transient_failure"].count == 40
    assert tallies["slow_handler"].count == 2
    assert tallies["crash_once"].count == 1  # its counter was lost, the pool saw the death
    assert tallies["replay"].count == 9
    assert tallies["redis_sigkill"].skipped and not tallies["redis_sigkill"].missing
    assert tallies["poison_job"].missing and tallies["hung_handler"].missing
    # the poison job's deaths are not the crash_once fault's
    assert [(t.kind, t.count) for t in poisoned if t.count] == [
        ("crash_once", 1),
        ("poison_job", 4),
        ("hung_handler", 2),
    ]


def test_the_poison_key_and_the_hang_go_to_their_steps_and_the_time_limit_to_the_workers(
    tmp_path: Path,
) -> None:
    options = ChaosOptions(
        fail_rate=0,
        slow_rate=0,
        crash_once_step=None,
        poison_step="points",
        hang_step="stock",
        hang_rate=0.5,
        hang_ms=4000,
        time_limit=2.5,
    )
    faults = handler_faults(options)
    assert set(faults) == {"points", "stock"}
    assert faults["points"].poison_key == POISON_KEY and not faults["points"].hang_rate
    assert (faults["stock"].hang_rate, faults["stock"].hang_ms) == (0.5, 4000)
    assert faults["stock"].poison_key is None
    env = worker_env({}, data_dir=tmp_path, redis_url="r", database_url="d", options=options)
    assert env["ORDERS_STEP_TIME_LIMIT_SECONDS"] == "2.5"


def test_a_hang_must_outlast_the_time_limit() -> None:
    with pytest.raises(ValueError):
        ChaosOptions(hang_ms=2000, time_limit=3.0)
    with pytest.raises(ValueError):
        ChaosOptions(time_limit=0)
    assert ChaosOptions(hang_step=None, time_limit=0).time_limit == 0


def test_the_poison_job_must_die_alone_and_a_hung_run_must_time_out() -> None:
    def found(poison, **kw):
        args = {"poison_enabled": True, "hangs": 0, "timed_out": 0} | kw
        return [(f.invariant, f.detail) for f in isolation_findings(poison, **args)]

    alone = PoisonOutcome(planted=1, reason="worker_lost", attempts=3)
    assert found(alone) == []
    assert found(PoisonOutcome(planted=1, reason="worker_lost", others_lost=["a", "b"])) == [
        (POISON_ISOLATED, "2 other job(s) dead-lettered as worker_lost: a, b")
    ]
    never_dead = [(POISON_ISOLATED, "the poison job ended as not dead")]
    assert found(PoisonOutcome(planted=1)) == never_dead
    assert found(None) == [(POISON_ISOLATED, "the poison job never read")]
    assert found(None, poison_enabled=False) == []
    assert found(alone, hangs=2) == [(HANG_TIMED_OUT, "2 hung run(s), none failed as timed_out")]
    assert found(alone, hangs=2, timed_out=2) == []


def test_the_transient_failure_tally_names_the_runs_its_rate_applied_to() -> None:
    """Faults stop when placing ends; steps after stock mostly run later, so a
    count far below rate x orders is right, and the report must show the runs."""
    counters = {
        "applied:notification": 25,
        "duplicate:notification": 3,
        "injected:fail:notification": 12,
        "applied:stock": 70,
        "injected:slow:points": 1,
    }
    runs = handler_runs(counters)
    facts = RunFacts(first_order_id=1, runs_while_on=runs)

    tallies = {t.kind: t for t in fault_tallies(ChaosOptions(), facts, counters)}

    assert runs == {"notification": 40, "stock": 70}
    assert tallies["transient_failure"].count == 12
    assert tallies["transient_failure"].setting.endswith("; 40 runs while on")
    unread = fault_tallies(ChaosOptions(), RunFacts(first_order_id=1), counters)
    assert "runs while on" not in {t.kind: t for t in unread}["transient_failure"].setting


def test_a_lease_of_the_pauses_own_millisecond_is_judged_by_the_fence() -> None:
    """Regression: a lease made just before the pause, in the same millisecond, was
    reported as a start inside the pause (a cluster chaos run failed on it)."""
    since = 1_796_571_872_533
    before, after = since * 1000 + 2, since * 1000 + 3  # the same millisecond
    journal = Journal(leases={("points", before): ["a"], ("points", after): ["b"]})
    window = PauseWindow(since, until_ms=since + 459, fence=before)
    findings = starts_while_paused(journal, "points", [window])
    assert [f.detail.split()[1] for f in findings] == ["b"]
    # without a fence (an older report), the millisecond alone decides: both count
    assert len(starts_while_paused(journal, "points", [PauseWindow(since, since + 459)])) == 2
    # a fence set back by a Redis crash (AOF tail dropped) judges no earlier millisecond
    earlier = Journal(leases={("points", (since - 5000) * 1000 + 7): ["d"]})
    assert starts_while_paused(earlier, "points", [PauseWindow(since, since + 459, fence=5)]) == []
    # a lease after the resume was sent is no finding
    late = Journal(leases={("points", (since + 459) * 1000): ["c"]})
    assert starts_while_paused(late, "points", [window]) == []
