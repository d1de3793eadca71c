"""An ``orders`` worker process that also counts its database commits.

``python -m benchmarks.e2e_worker STEP [--concurrency C] [--batch-size B] [--no-sweep]
[--metrics]`` (the defaults are ``orders worker``'s, except metrics: pass ``--metrics``):
exactly what ``orders worker`` runs (``orders.worker.runner.run_worker``, traced as the
environment says), plus a SQLAlchemy ``commit`` listener that adds each commit to a
Redis counter.
"""

from __future__ import annotations

import argparse
import logging

from sqlalchemy import event

from orders.app.bootstrap import build_worker_app
from orders.app.settings import Settings
from orders.observability.tracing import tracer_provider
from orders.worker import defaults
from orders.worker.runner import run_worker

COMMITS_KEY = "bench:e2e:commits"


def count_commits(app: object) -> None:
    """Count every commit of ``app.engine`` in Redis (``INCR bench:e2e:commits``)."""
    engine, client = app.engine, app.redis  # type: ignore[attr-defined]

    @event.listens_for(engine, "commit")
    def _on_commit(conn: object) -> None:
        client.incr(COMMITS_KEY)


def main() -> None:
    """Parse options, instrument the engine, serve until SIGTERM."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("steps", nargs="+")
    parser.add_argument("--concurrency", type=int, default=defaults.CONCURRENCY)
    parser.add_argument("--batch-size", type=int, default=defaults.BATCH_SIZE)
    parser.add_argument("--no-sweep", action="store_true")
    parser.add_argument("--metrics", action="store_true", help="record metrics (CLI default)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    settings = Settings()
    app = build_worker_app(
        settings,
        lanes=args.concurrency * len(args.steps),
        tracer_provider=tracer_provider(settings.resolved_data_dir()),  # ORDERS_TRACES, OTEL_*
    )
    count_commits(app)
    try:
        run_worker(
            app,
            args.steps,
            concurrency=args.concurrency,
            batch_size=args.batch_size,
            sweep=not args.no_sweep,
            grace_seconds=5.0,
            record_metrics=args.metrics,
        )
    finally:
        app.close()


if __name__ == "__main__":
    main()
