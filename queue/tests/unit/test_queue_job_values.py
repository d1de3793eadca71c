"""The per-job values (leases, fetched jobs, contexts, outcomes) keep their dataclass
behaviour with the slot-storing constructor the worker's hot path uses."""

import dataclasses
import pickle
from dataclasses import dataclass

import pytest

from reliable_queue import JobContext, Lease, RawJob
from reliable_queue.execution import Dead, Retry, Succeeded
from reliable_queue.job import (
    frozen_fast_init,
    make_context,
    make_lease,
    make_raw_job,
    slots_factory,
)


def context(**changes):
    values = dict(
        job_id="j1",
        queue="q",
        task="t",
        attempt=2,
        max_attempts=5,
        lease_token="7:w",
        fencing_token=7,
        enqueued_at=1.5,
        idempotency_key=None,
    )
    values.update(changes)
    return JobContext(**values)


@pytest.mark.parametrize(
    "value",
    [
        Lease("j1", "7:w"),
        RawJob("q", "j1", "7:w", 2, b"{}"),
        context(),
        Succeeded(Lease("j1", "7:w")),
        Retry(Lease("j1", "7:w"), 1.5, "E: x", "tb"),
        Dead(Lease("j1", "7:w"), "error", "E: x", ""),
    ],
)
def test_values_stay_frozen_comparable_hashable_and_picklable(value):
    name = dataclasses.fields(value)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, name, "other")
    assert pickle.loads(pickle.dumps(value)) == value
    assert hash(value) == hash(dataclasses.replace(value))
    assert repr(value).startswith(type(value).__name__ + "(")


def test_positional_and_keyword_construction_agree():
    assert context() == JobContext("j1", "q", "t", 2, 5, "7:w", 7, 1.5, None)
    assert context().fencing_token == 7 and context(attempt=3).attempt == 3
    assert dataclasses.replace(context(), attempt=3) == context(attempt=3)
    with pytest.raises(TypeError):
        JobContext("j1", "q")  # a missing argument is refused, as before


def test_a_fetched_job_derives_its_lease():
    job = RawJob(queue="q", job_id="j1", token="7:w", attempt=1, record=b"{}")
    assert job.lease == Lease("j1", "7:w")
    assert dataclasses.replace(job, token="8:w").lease == Lease("j1", "8:w")


def test_defaults_and_post_init_are_kept():
    seen = []

    @frozen_fast_init
    @dataclass(frozen=True, slots=True)
    class Point:
        x: int
        y: int = 3

        def __post_init__(self):
            seen.append((self.x, self.y))

    assert Point(1) == Point(1, 3) and Point(x=1, y=4).y == 4
    assert seen == [(1, 3), (1, 3), (1, 4)]


def test_only_frozen_slots_dataclasses_without_factories_are_taken():
    @dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclass(slots=True)
    class NotFrozen:
        x: int

    @dataclass(frozen=True, slots=True)
    class Factory:
        x: list = dataclasses.field(default_factory=list)

    for cls in (NoSlots, NotFrozen, Factory):
        with pytest.raises(TypeError):
            frozen_fast_init(cls)


def test_the_fast_makers_make_genuine_frozen_instances():
    job = make_raw_job("q", "j1", "7:w", 2, b"{}")
    ctx = make_context("j1", "q", "t", 2, 5, "7:w", 7, 1.5, None)
    lease = make_lease("j1", "7:w")
    for made, built in (
        (job, RawJob("q", "j1", "7:w", 2, b"{}")),
        (ctx, context()),
        (lease, Lease("j1", "7:w")),
    ):
        assert type(made) is type(built) and made == built and hash(made) == hash(built)
        assert repr(made) == repr(built)
        assert pickle.loads(pickle.dumps(made)) == built
        with pytest.raises(dataclasses.FrozenInstanceError):
            made.job_id = "other"  # type: ignore[misc]
    assert job.lease == lease  # __post_init__ ran


def test_a_fast_maker_keeps_defaults_and_refuses_what_it_cannot_make():
    @dataclass(frozen=True, slots=True)
    class Point:
        x: int
        y: int = 3

    make = slots_factory(Point)
    assert make(1) == Point(1, 3) and make(1, 4) == Point(1, 4)

    @dataclass(slots=True)
    class Mutable:
        x: int

    made = slots_factory(Mutable)(1)
    assert type(made) is Mutable and made == Mutable(1)

    @dataclass(frozen=True)
    class NoSlots:
        x: int

    @dataclass(frozen=True, slots=True)
    class Derived:
        x: int
        y: int = dataclasses.field(init=False, default=0)

    for cls in (NoSlots, Derived):
        with pytest.raises(TypeError):
            slots_factory(cls)
        if cls is Derived:
            with pytest.raises(TypeError):
                frozen_fast_init(cls)
