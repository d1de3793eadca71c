"""Each dialect's lock plan, and the pure parts of the dialects (ADR 0014, ADR 0027)."""

from __future__ import annotations

import pytest
from sqlalchemy import Integer, select, update
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import psycopg

from workflows.models import Workflow, WorkflowStep
from workflows.sql import (
    DIALECTS,
    POSTGRESQL,
    SQLITE,
    LockPlan,
    dialect_for,
    per_dialect,
)

_WF = Workflow.__table__
_COMPILERS = {SQLITE: sqlite.dialect(), POSTGRESQL: psycopg.dialect()}


def sql(dialect, statement) -> str:
    return str(statement.compile(dialect=_COMPILERS[dialect]))


@pytest.mark.parametrize(
    ("workflows", "conflicts", "plan"),
    [
        (1, 0, LockPlan.FENCE_BEFORE_EFFECT),  # a lone delivery: optimistic
        (1, 3, LockPlan.FENCE_BEFORE_EFFECT),
        (2, 0, LockPlan.LOCK_BEFORE_READING),  # a batch: its first write locks the database
        (50, 2, LockPlan.LOCK_BEFORE_READING),
    ],
)
def test_sqlite_locks_a_batch_first_and_fences_a_lone_delivery(workflows, conflicts, plan):
    assert SQLITE.lock_plan(workflows, conflicts) is plan


@pytest.mark.parametrize(
    ("workflows", "conflicts", "plan"),
    [
        (1, 0, LockPlan.LOCK_BEFORE_MARKING),  # the effect runs before any workflow lock
        (50, 0, LockPlan.LOCK_BEFORE_MARKING),
        (1, 1, LockPlan.LOCK_BEFORE_READING),  # a rerun locks first: it cannot lose again
        (50, 5, LockPlan.LOCK_BEFORE_READING),
    ],
)
def test_postgresql_locks_before_the_marking_and_a_rerun_locks_first(workflows, conflicts, plan):
    assert POSTGRESQL.lock_plan(workflows, conflicts) is plan


def test_only_the_dialect_that_runs_effects_unlocked_rechecks_at_the_marking():
    """A plan that runs the effect before the lock needs a marking that checks the rows."""
    for dialect in DIALECTS:
        unlocked = any(
            dialect.lock_plan(workflows, 0) is LockPlan.LOCK_BEFORE_MARKING
            for workflows in (1, 2, 50)
        )
        assert dialect.marking_rechecks is unlocked, dialect


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("sqlite:///orders.db", SQLITE),
        ("sqlite://", SQLITE),
        ("postgresql://u@h/db", POSTGRESQL),
        ("postgres://u@h/db", POSTGRESQL),
        ("postgresql+psycopg://u@h/db", POSTGRESQL),
        ("postgresql+psycopg2://u@h/db", POSTGRESQL),
    ],
)
def test_a_url_names_its_dialect(given, expected):
    assert dialect_for(given) is expected


def test_another_database_is_refused():
    with pytest.raises(ValueError, match="SQLite or PostgreSQL"):
        dialect_for("mysql://u@h/db")


def test_per_dialect_builds_once_for_every_dialect():
    built = per_dialect(lambda d: d.name)
    assert built == {SQLITE: "sqlite", POSTGRESQL: "postgresql"}


def test_per_dialect_builds_a_form_at_its_first_lookup_and_never_the_other_dialects():
    calls: list[str] = []

    def build(dialect):
        calls.append(dialect.name)
        return object()

    forms = per_dialect(build)
    assert calls == []  # nothing built at import time
    first = forms[SQLITE]
    assert forms[SQLITE] is first  # built once, then kept
    assert calls == ["sqlite"]  # a process on SQLite never builds the PostgreSQL form
    assert len(forms) == 2 and list(forms) == list(DIALECTS)
    with pytest.raises(KeyError):
        forms["mysql"]  # type: ignore[index]
    assert calls == ["sqlite"]


@pytest.mark.parametrize("dialect", DIALECTS, ids=lambda d: d.name)
def test_an_id_list_is_one_parameter(dialect):
    text = sql(dialect, select(_WF.c.id).where(dialect.one_of(_WF.c.id, "ids")))
    assert ("= ANY (" in text) if dialect is POSTGRESQL else ("json_each(?)" in text)
    assert text.count("ids") == 1 if dialect is POSTGRESQL else text.count("?") == 1


def test_the_list_is_given_again_across_a_join_on_postgresql_only():
    assert SQLITE.one_of_again(WorkflowStep.workflow_id, "ids") == ()
    [again] = POSTGRESQL.one_of_again(WorkflowStep.workflow_id, "ids")
    assert "workflow_steps.workflow_id = ANY (%(ids)s" in sql(POSTGRESQL, select(1).where(again))


def test_the_workflow_lock_takes_row_locks_in_id_order_on_postgresql_only():
    def lock(d):
        return update(_WF).where(*d.lock_in_order(_WF.c.id, "ids")).values(version=1)

    assert "FOR UPDATE" not in sql(SQLITE, lock(SQLITE))
    assert "ORDER BY workflows.id FOR UPDATE" in sql(POSTGRESQL, lock(POSTGRESQL))


def test_rows_bound_as_one_parameter_per_dialect():
    columns = {"a": Integer(), "b": Integer()}
    values = {"a": [1, 2], "b": [3, 4]}
    assert SQLITE.bind_rows("r", values) == {"r": [(1, 3), (2, 4)]}
    assert POSTGRESQL.bind_rows("r", values) == {"r_a": [1, 2], "r_b": [3, 4]}
    assert "json_each(?)" in sql(SQLITE, select(SQLITE.rows("r", columns)))
    assert "unnest(%(r_a)s::INTEGER[], %(r_b)s::INTEGER[])" in sql(
        POSTGRESQL, select(POSTGRESQL.rows("r", columns))
    )


def test_a_batch_insert_never_hands_back_ids():
    with pytest.raises(ValueError, match="load=True"):
        SQLITE.insert_rows(None, _WF, {"kind": ["k"]}, ids=True)  # type: ignore[arg-type]
