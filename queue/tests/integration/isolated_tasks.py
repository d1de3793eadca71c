"""Tasks for the isolation tests, built in the test process and in isolated children.

:func:`registry` is the children's factory (``isolated_tasks:registry``): it reads the
test's Redis and key prefix from ``ISOLATED_TASKS_REDIS_URL`` / ``ISOLATED_TASKS_PREFIX``
(the test sets them; a child inherits them). Every task runs with process isolation.
Markers are Redis keys ``<prefix>:marker:<job id>`` (value: the fencing token of the
delivery that wrote it) and ``<prefix>:refused:<job id>`` (``<reason> <fencing token>``
of a delivery whose hold was refused).

Tasks (payload fields):
    commit {}: writes its marker inside ``ctx.hold_lease()``.
    late_commit {sleep}: its first run sleeps ``sleep`` s, then commits as above; a
        refused hold is recorded and raised.
    long_hold {hold}: holds the guard for ``hold`` s, then writes its marker inside it.
    hold_at {wait, path}: sleeps ``wait`` s, asks for the guard, and inside it writes
        a file at ``path``.
    fail {kind}: raises ``ValueError`` (kind ``value``), ``PermanentError``
        (``permanent``) or ``AttemptLost('lease_lost')`` (``lost``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import redis

from reliable_queue import AttemptLost, PermanentError, RetryPolicy, TaskRegistry

URL_ENV, PREFIX_ENV = "ISOLATED_TASKS_REDIS_URL", "ISOLATED_TASKS_PREFIX"
NO_LIMIT = RetryPolicy(max_attempts=3, base_delay=0.05, jitter=False, time_limit=0)


def registry(limit: float = 0.5, fail_factory: bool = False) -> TaskRegistry:
    """The tasks; ``limit`` is the time limit (s) of ``long_hold`` and ``hold_at``."""
    if fail_factory or os.environ.get("ISOLATED_TASKS_FAIL"):
        raise RuntimeError("the factory refuses on purpose")
    client = redis.Redis.from_url(os.environ[URL_ENV])
    prefix = os.environ[PREFIX_ENV]
    limited = RetryPolicy(max_attempts=1, time_limit=limit)
    tasks = TaskRegistry()

    def mark(ctx) -> None:
        client.set(f"{prefix}:marker:{ctx.job_id}", ctx.fencing_token)

    @tasks.task("commit", retry=NO_LIMIT, isolation="process")
    def commit(payload, ctx) -> None:
        with ctx.hold_lease():
            mark(ctx)

    @tasks.task("late_commit", retry=NO_LIMIT, isolation="process")
    def late_commit(payload, ctx) -> None:
        if ctx.attempt == 1:
            time.sleep(payload["sleep"])
        try:
            with ctx.hold_lease():
                mark(ctx)
        except AttemptLost as exc:
            client.set(f"{prefix}:refused:{ctx.job_id}", f"{exc.reason} {ctx.fencing_token}")
            raise

    @tasks.task("long_hold", retry=limited, isolation="process")
    def long_hold(payload, ctx) -> None:
        with ctx.hold_lease():
            time.sleep(payload["hold"])
            mark(ctx)

    @tasks.task("hold_at", retry=limited, isolation="process")
    def hold_at(payload, ctx) -> None:
        time.sleep(payload["wait"])
        with ctx.hold_lease():
            Path(payload["path"]).write_text("committed")

    @tasks.task("fail", retry=NO_LIMIT, isolation="process")
    def fail(payload, ctx) -> None:
        kind = payload["kind"]
        if kind == "permanent":
            raise PermanentError("no use retrying")
        if kind == "lost":
            raise AttemptLost("lease_lost")
        raise ValueError(f"bad value at attempt {ctx.attempt}")

    return tasks
