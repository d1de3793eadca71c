"""EXPLAIN plans of the relay sweep and ``orders status`` at about a million orders.

    uv run python -m benchmarks.pg_plans [--url postgresql://postgres@127.0.0.1:5432/test]
                                         [--orders 1000000] [--in-flight 2000]

Creates a throwaway database beside the one named by ``--url``, migrates it,
fills ``orders``, ``workflows`` and ``workflow_steps`` (four steps per order)
with ``INSERT ... SELECT generate_series`` — all finished except the last
``--in-flight`` orders, whose steps are pending or dispatched long ago — runs
ANALYZE, prints ``EXPLAIN (ANALYZE, BUFFERS)`` of each query orderflow runs
there, and drops the database. The queries are compiled from the same
SQLAlchemy statements the relay and ``orders status`` use.
"""

from __future__ import annotations

import argparse
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
from sqlalchemy import select
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import make_url

from orders.app.migrate import upgrade_database
from orders.domain.models import Order
from orders.domain.steps import STEPS
from workflows.models import StepStatus, Workflow, WorkflowStep

FILL = """
-- FK triggers off: a throwaway database
SET session_replication_role = replica;
INSERT INTO orders (id, customer_id, total_price, order_date, status, source, placed_at)
SELECT g, 1, 10, current_date,
       CASE WHEN g > %(done)s THEN 'placed' ELSE 'completed' END, 'random', now()
FROM generate_series(1, %(n)s) g;
INSERT INTO workflows (id, kind, subject_id, status, created_at, updated_at, version)
SELECT g, 'order', g, CASE WHEN g > %(done)s THEN 'running' ELSE 'done' END, now(), now(), 1
FROM generate_series(1, %(n)s) g;
INSERT INTO workflow_steps (id, workflow_id, step, queue, task, payload, status, attempts,
                            created_at, dispatched_at, finished_at)
SELECT (g - 1) * 4 + s, g, (%(steps)s::text[])[s], (%(steps)s::text[])[s], 'step', '{}',
       CASE WHEN g <= %(done)s THEN 'done'
            WHEN g %% 2 = 0 THEN 'pending' ELSE 'dispatched' END,
       1, now() - interval '1 hour',
       CASE WHEN g %% 2 = 0 AND g > %(done)s THEN NULL ELSE now() - interval '1 hour' END,
       CASE WHEN g <= %(done)s THEN now() ELSE NULL END
FROM generate_series(1, %(n)s) g, generate_series(1, 4) s;
ANALYZE;
"""


def queries(last_ids: int, total: int) -> dict[str, object]:
    """The statements to explain, built like the relay and ``orders status`` build them."""
    from orders.domain.queries import totals  # noqa: F401 - documents where the shape comes from

    cutoff = datetime.now(UTC) - timedelta(seconds=30)
    open_states = (StepStatus.DISPATCHED, StepStatus.FAILED)
    return {
        "relay sweep: pending steps, oldest first (dispatch_pending)": select(WorkflowStep)
        .where(WorkflowStep.status == StepStatus.PENDING)
        .order_by(WorkflowStep.id)
        .limit(1000),
        "relay sweep: dispatched long ago, not done": select(WorkflowStep)
        .where(WorkflowStep.status.in_(open_states), WorkflowStep.dispatched_at < cutoff)
        .order_by(WorkflowStep.dispatched_at)
        .limit(1000),
        "orders status <id>: one order's workflow and steps": select(WorkflowStep).where(
            WorkflowStep.workflow_id == total - 1
        ),
        "orders status: steps by state of one run's orders": _steps_by_state(total - last_ids),
        "orders status: steps by state of every order": _steps_by_state(1),
    }


def _steps_by_state(first_order_id: int) -> object:
    from sqlalchemy import and_, func

    joined = and_(Workflow.kind == "order", Workflow.subject_id == Order.id)
    return (
        select(WorkflowStep.step, WorkflowStep.status, func.count())
        .join(Workflow, Workflow.id == WorkflowStep.workflow_id)
        .join(Order, joined)
        .where(Order.id >= first_order_id)
        .group_by(WorkflowStep.step, WorkflowStep.status)
    )


def main() -> None:
    """Create, fill, explain, drop."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--orders", type=int, default=1_000_000)
    parser.add_argument("--in-flight", type=int, default=2000)
    opts = parser.parse_args()
    base = make_url(opts.url)
    name = f"plans_{uuid.uuid4().hex[:8]}"
    admin = base.set(drivername="postgresql").render_as_string(hide_password=False)
    url = base.set(drivername="postgresql", database=name).render_as_string(hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        upgrade_database(url)
        with psycopg.connect(url, autocommit=True) as conn:
            started = time.monotonic()
            params = {"n": opts.orders, "done": opts.orders - opts.in_flight, "steps": list(STEPS)}
            for statement in filter(str.strip, FILL.split(";\n")):
                conn.execute(statement, params if "%(" in statement else None)
            print(f"-- filled {opts.orders} orders, {4 * opts.orders} steps in "
                  f"{time.monotonic() - started:.0f} s")  # fmt: skip
            for title, stmt in queries(opts.in_flight, opts.orders).items():
                sql = str(
                    stmt.compile(
                        dialect=postgresql.dialect(), compile_kwargs={"literal_binds": True}
                    )  # type: ignore[attr-defined]
                )
                rows = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}").fetchall()
                print(f"\n-- {title}\n" + "\n".join(r[0] for r in rows))
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
