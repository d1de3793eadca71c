"""Injected-fault decisions are pure: same seed, same outcome; rates are honoured."""

from __future__ import annotations

import dataclasses
import random
import time

import pytest
from pydantic import ValidationError

from orders.worker.faults import (
    Decision,
    FaultConfig,
    FaultMiddleware,
    FaultSource,
    InjectedFailure,
    decide,
)
from reliable_queue import JobContext


def test_no_config_injects_nothing() -> None:
    assert decide(None, random.Random(1)) == Decision()
    assert decide(FaultConfig(), random.Random(1)) == Decision()


def test_fail_rate_one_always_fails_before_the_effect() -> None:
    rng = random.Random(7)
    decisions = [decide(FaultConfig(fail_rate=1.0), rng) for _ in range(50)]
    assert all(d.fail and not d.permanent and not d.crash_after for d in decisions)


def test_permanent_flag_marks_injected_failures_permanent() -> None:
    d = decide(FaultConfig(fail_rate=1.0, permanent=True), random.Random(3))
    assert d.fail and d.permanent


def test_fail_rate_is_honoured_statistically() -> None:
    rng = random.Random(42)
    fails = sum(decide(FaultConfig(fail_rate=0.3), rng).fail for _ in range(10_000))
    assert 2700 < fails < 3300


def test_crash_never_coincides_with_a_failure() -> None:
    rng = random.Random(5)
    for _ in range(2000):
        d = decide(FaultConfig(fail_rate=0.5, crash_rate=0.5), rng)
        assert not (d.fail and d.crash_after)


def test_delay_is_converted_from_milliseconds_to_seconds() -> None:
    assert decide(FaultConfig(delay_ms=250), random.Random(0)).delay_seconds == 0.25


@pytest.mark.parametrize("field", ["fail_rate", "crash_rate", "slow_rate"])
def test_rates_outside_zero_to_one_are_refused(field: str) -> None:
    with pytest.raises(ValidationError):
        FaultConfig(**{field: 1.5})


def test_slow_rate_stalls_only_that_share_of_runs() -> None:
    rng = random.Random(11)
    config = FaultConfig(slow_rate=0.1, slow_ms=3000)
    decisions = [decide(config, rng) for _ in range(10_000)]
    slow = [d for d in decisions if d.slow_seconds]
    assert 800 < len(slow) < 1200
    assert {d.slow_seconds for d in slow} == {3.0}
    assert all(d.delay_seconds == 0 for d in decisions)


def test_a_slow_rate_without_a_length_injects_nothing() -> None:
    assert not FaultConfig(slow_rate=0.5).active
    assert FaultConfig(slow_rate=0.5, slow_ms=10).active


class StaticStore:
    """A fault store holding fixed configs (the FaultStore protocol, in memory)."""

    def __init__(self, configs: dict[str, FaultConfig]) -> None:
        self.configs = configs
        self.claimed: set[str] = set()

    def all(self) -> dict[str, FaultConfig]:
        return dict(self.configs)

    def claim_crash_once(self, step: str) -> bool:
        if step in self.claimed:
            return False
        self.claimed.add(step)
        return True


def context(queue: str = "points") -> JobContext:
    return JobContext(
        job_id="j1",
        queue=queue,
        task=f"orders.{queue}",
        attempt=1,
        max_attempts=5,
        lease_token="1:w",
        fencing_token=1,
        enqueued_at=0.0,
        idempotency_key=None,
    )


def middleware(configs: dict[str, FaultConfig], **kw: object) -> FaultMiddleware:
    return FaultMiddleware(FaultSource(StaticStore(configs)), rng=random.Random(1), **kw)  # type: ignore[arg-type]


def test_a_slow_run_gives_up_its_lease_before_stalling_and_is_counted() -> None:
    events: list[object] = []
    faults = middleware(
        {"points": FaultConfig(slow_rate=1.0, slow_ms=1)},
        stall=lambda ctx: events.append(("stall", ctx.job_id)),
        on_injected=lambda step, kind: events.append((step, kind)),
    )

    result = faults(context(), {}, lambda: events.append("handler") or "ok")

    assert result == "ok"
    assert events == [("points", "slow"), ("stall", "j1"), "handler"]


def test_injected_failures_and_the_crash_once_are_counted() -> None:
    counted: list[tuple[str, str]] = []
    kills: list[int] = []
    faults = middleware(
        {"points": FaultConfig(fail_rate=1.0), "stock": FaultConfig(crash_once=True)},
        kill=lambda: kills.append(1),
        on_injected=lambda step, kind: counted.append((step, kind)),
    )

    with pytest.raises(InjectedFailure):
        faults(context("points"), {}, lambda: None)
    faults(context("stock"), {}, lambda: None)
    faults(context("stock"), {}, lambda: None)

    assert counted == [("points", "fail"), ("stock", "crash")]
    assert kills == [1]


def test_a_poison_job_kills_its_process_before_the_handler_at_every_run() -> None:
    counted: list[tuple[str, str]] = []
    kills: list[int] = []
    ran: list[str] = []
    faults = middleware(
        {"notification": FaultConfig(poison_key="chaos:poison")},
        kill=lambda: kills.append(1),
        on_injected=lambda step, kind: counted.append((step, kind)),
    )
    poison = dataclasses.replace(context("notification"), idempotency_key="chaos:poison:1")
    other = dataclasses.replace(context("notification"), idempotency_key="7:notification")

    faults(poison, {}, lambda: ran.append("poison"))  # kill() is a stub here: it returns
    faults(other, {}, lambda: ran.append("other"))
    faults(poison, {}, lambda: ran.append("poison"))

    assert kills == [1, 1]
    assert counted == [("notification", "poison"), ("notification", "poison")]
    assert not FaultConfig().active and FaultConfig(poison_key="k").active


def test_a_hung_run_sleeps_with_its_lease_kept_and_is_counted() -> None:
    events: list[object] = []
    faults = middleware(
        {"stock": FaultConfig(hang_rate=1.0, hang_ms=20)},
        stall=lambda ctx: events.append("stall"),  # a hang keeps its lease: no stall
        on_injected=lambda step, kind: events.append((step, kind)),
    )

    began = time.monotonic()
    assert faults(context("stock"), {}, lambda: events.append("handler") or "ok") == "ok"

    assert time.monotonic() - began >= 0.02
    assert events == [("stock", "hang"), "handler"]
    assert not FaultConfig(hang_rate=0.5).active  # a rate without a length injects nothing


def test_a_freeze_in_a_transaction_stops_the_process_at_its_rate_and_is_counted() -> None:
    events: list[object] = []
    faults = middleware(
        {"stock": FaultConfig(freeze_in_tx_rate=0.5)},
        freeze=lambda: events.append("frozen"),
        on_injected=lambda step, kind: events.append((step, kind)),
    )

    for _ in range(400):
        faults.in_transaction("stock")
    faults.in_transaction("points")  # no config: nothing

    frozen = events.count("frozen")
    assert 150 < frozen < 250
    assert events.count(("stock", "freeze_in_tx")) == frozen
    assert FaultConfig(freeze_in_tx_rate=0.01).active
    with pytest.raises(ValidationError):
        FaultConfig(freeze_in_tx_rate=1.5)


def test_an_injected_crash_logs_why_before_the_process_kills_itself(
    caplog: pytest.LogCaptureFixture,
) -> None:
    said_before_kill: list[list[str]] = []
    faults = middleware(
        {"stock": FaultConfig(crash_rate=1.0)},
        kill=lambda: said_before_kill.append([r.getMessage() for r in caplog.records]),
    )

    with caplog.at_level("WARNING", logger="orders.worker"):
        faults(context("stock"), {}, lambda: None)

    (said,) = said_before_kill
    assert len(said) == 1 and said[0].startswith("injected crash on step stock (crash rate 1,")
    assert caplog.records[0].exit_reason == "injected crash"  # type: ignore[attr-defined]
