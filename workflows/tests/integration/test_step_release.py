"""Releasing waiting steps: the read of a batch's workflows stays on their own rows."""

from __future__ import annotations

import pytest

from workflows.dependencies import _STEPS_OF
from workflows.sql import SQLITE


def test_the_waiting_steps_read_does_not_walk_every_waiting_row_on_sqlite(engine):
    """Regression: without statistics SQLite found the batch's workflows with a
    waiting step through the status index, visiting every waiting row of the
    database in each batch, while the batch held the write lock."""
    if engine.dialect.name != "sqlite":
        pytest.skip("PostgreSQL plans from its statistics")
    statement = _STEPS_OF[SQLITE].params(ids=list(range(1, 51)))
    sql = str(statement.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as connection:
        plan = " | ".join(
            row[-1] for row in connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")
        )
    assert "ix_workflow_steps_status" not in plan, plan
    assert "uq_workflow_steps_workflow_id_step" in plan, plan
