"""Which database errors count as a lost race, and how the unit of work is retried."""

from __future__ import annotations

import random
import sqlite3

import pytest
from sqlalchemy.exc import IntegrityError, OperationalError, ProgrammingError
from sqlalchemy.orm.exc import StaleDataError

from workflows.conflicts import is_conflict, retry_on_conflict
from workflows.errors import ConcurrencyConflict, StepNotFound, WorkflowError


class PgError(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(f"sqlstate {sqlstate}")
        self.sqlstate = sqlstate


def wrap(cls, orig):
    return cls("UPDATE ...", {}, orig)


@pytest.mark.parametrize(
    "exc",
    [
        StaleDataError("UPDATE statement on table 'workflows' expected to update 1 row(s)"),
        wrap(OperationalError, sqlite3.OperationalError("database is locked")),
        wrap(
            IntegrityError, sqlite3.IntegrityError("UNIQUE constraint failed: shipments.order_id")
        ),
        wrap(OperationalError, PgError("40001")),
        wrap(OperationalError, PgError("40P01")),
        wrap(IntegrityError, PgError("23505")),
    ],
    ids=["stale", "sqlite-busy", "sqlite-unique", "pg-serialization", "pg-deadlock", "pg-unique"],
)
def test_lost_races_are_conflicts(exc):
    assert is_conflict(exc)


@pytest.mark.parametrize(
    "exc",
    [
        ValueError("bad"),
        wrap(IntegrityError, sqlite3.IntegrityError("FOREIGN KEY constraint failed")),
        wrap(IntegrityError, PgError("23503")),
        wrap(ProgrammingError, PgError("42P01")),
        wrap(OperationalError, sqlite3.OperationalError("no such table: orders")),
    ],
    ids=["value", "sqlite-fk", "pg-fk", "pg-undefined-table", "sqlite-no-table"],
)
def test_other_errors_are_not_conflicts(exc):
    assert not is_conflict(exc)


def test_conflicting_unit_of_work_is_rerun_until_it_succeeds():
    outcomes = [StaleDataError("lost"), StaleDataError("lost again"), "ok"]
    pauses: list[float] = []
    seen: list[BaseException] = []

    def work() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    result = retry_on_conflict(
        work, sleep=pauses.append, rng=random.Random(1), on_conflict=seen.append
    )
    assert result == "ok"
    assert len(pauses) == 2 and all(0 <= p <= 0.25 for p in pauses)
    assert len(seen) == 2


def test_endless_conflicts_become_a_retryable_error():
    def work() -> None:
        raise StaleDataError("always lost")

    with pytest.raises(ConcurrencyConflict) as caught:
        retry_on_conflict(work, attempts=3, sleep=lambda _: None)
    assert caught.value.retryable
    assert isinstance(caught.value.__cause__, StaleDataError)


def test_non_conflict_errors_pass_through_at_once():
    calls = []

    def work() -> None:
        calls.append(1)
        raise StepNotFound("no such step")

    with pytest.raises(StepNotFound):
        retry_on_conflict(work, sleep=lambda _: None)
    assert calls == [1]
    assert issubclass(StepNotFound, WorkflowError) and not StepNotFound.retryable
