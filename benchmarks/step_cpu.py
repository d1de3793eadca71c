"""CPU per order of each step's unit of work, in one process, without the queue.

``python -m benchmarks.step_cpu [--orders N] [--batch B] [--database sqlite|postgresql]
[--repeat R]`` places N TPC-H orders (steps left pending in the outbox, nothing
published), then runs every step's deliveries through the handler a worker calls
(``orders.domain.handlers.handle_steps``), B deliveries per call, stock first
(the other three wait for it), and prints the process's CPU milliseconds per order
for each step and in all. It is what a step worker spends inside its unit of
work (the tracker, the effect, the step release and SQLite itself, which runs
in-process) and nothing else: no Redis, no lanes, no other process competing for
the cores, so two checkouts compare on a loaded machine by CPU time where the
end-to-end wall clock cannot. On PostgreSQL the server's own CPU is not counted.

Each repeat uses a fresh database; the best (lowest) figure of the repeats is kept.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

from sqlalchemy import select

from orders.app.bootstrap import build
from orders.app.placement import place
from orders.app.settings import Settings
from orders.domain.handlers import handle_steps
from orders.domain.steps import STEPS
from orders.sources.tpch import load_tpch
from workflows.models import Workflow, WorkflowStep
from workflows.tracker import StepRun


def runs_of(app: object, step: str) -> list[StepRun]:
    """One delivery per step row of ``step``, in workflow order (attempt 1)."""
    with app.session_factory() as session:  # type: ignore[attr-defined]
        rows = session.execute(
            select(WorkflowStep.workflow_id, Workflow.subject_id, WorkflowStep.id)
            .join(Workflow, Workflow.id == WorkflowStep.workflow_id)
            .where(WorkflowStep.step == step)
            .order_by(WorkflowStep.workflow_id)
        ).all()
    return [StepRun(wf, step, order, 1, f"job-{row_id}", row_id) for wf, order, row_id in rows]


def measure(database: str, orders: int, batch: int) -> dict[str, float]:
    """Place ``orders`` orders on a fresh database and time each step's deliveries.

    Returns:
        step name -> CPU milliseconds per order (``"all"``: the sum).
    """
    from .e2e import drop_pg_database, fresh_pg_database

    data_dir = Path(tempfile.mkdtemp(prefix="bench-step-cpu-"))
    url = fresh_pg_database() if database == "postgresql" else f"sqlite:///{data_dir / 'orders.db'}"
    app = build(Settings(database_url=url, data_dir=data_dir), auto_migrate=True)
    try:
        load_tpch(app.session_factory, data_dir)
        place(app.session_factory, orders, publisher=None)
        out: dict[str, float] = {}
        for step in STEPS:
            runs = runs_of(app, step)
            cpu = time.process_time()
            for i in range(0, len(runs), batch):
                for result in handle_steps(app.session_factory, runs[i : i + batch]):
                    if isinstance(result, Exception):
                        raise result
            out[step] = 1000 * (time.process_time() - cpu) / orders
        out["all"] = sum(out.values())
        return out
    finally:
        app.close()
        if database == "postgresql":
            drop_pg_database()


def main() -> None:
    """Parse options, measure, print one line per step (best of the repeats)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--orders", type=int, default=2000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    best: dict[str, float] = {}
    for _ in range(args.repeat):
        for step, ms in measure(args.database, args.orders, args.batch).items():
            best[step] = min(ms, best.get(step, ms))
    print(f"{args.database}, {args.orders} orders, batch {args.batch}: CPU ms per order")
    for step, ms in best.items():
        print(f"  {step:<13} {ms:6.3f}")


if __name__ == "__main__":
    main()
