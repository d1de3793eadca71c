"""Injected-fault decisions are pure: same seed, same outcome; rates are honoured."""

from __future__ import annotations

import random

import pytest
from pydantic import ValidationError

from orders.faults import Decision, FaultConfig, decide


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


@pytest.mark.parametrize("field", ["fail_rate", "crash_rate"])
def test_rates_outside_zero_to_one_are_refused(field: str) -> None:
    with pytest.raises(ValidationError):
        FaultConfig(**{field: 1.5})
