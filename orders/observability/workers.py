"""The worker processes as the views show them: read from Redis, and a few words for each.

Every worker process publishes its state (``reliable_queue.presence``); ``orders
status``, ``orders watch`` and the dashboard's workers page read it through
:func:`read_workers`, at most :data:`WORKERS_SHOWN` at a time, newest first. A worker
not heard of for one heartbeat interval is ``gone`` with its last known state. Texts
are untrusted: the views show them through their escaping rule (ADR 0013). See
[ADR 0043](../../docs/adr/0043-workers-publish-their-state.md).
"""

from __future__ import annotations

from collections.abc import Sequence

from orders.app.bootstrap import App
from orders.domain.steps import ALL_STEPS
from reliable_queue import WorkerInfo, WorkersView, workers

WORKERS_SHOWN = 20
"""Most worker processes a view lists (the most recently heard of first)."""


def read_workers(app: App, limit: int = WORKERS_SHOWN) -> WorkersView:
    """The worker processes of this Redis namespace, newest first.

    Args:
        app: the application (its Redis and queue prefix).
        limit: most workers returned (1..1000).

    Raises:
        reliable_queue.QueueConnectionError: Redis unreachable.
    """
    return workers(app.redis, app.settings.queue_prefix, limit=limit)


def ago(seconds: float | None) -> str:
    """A duration for people: ``0.4 s``, ``12 s``, ``3 min``, ``2.5 h``, ``3 d``; ``-``
    for None."""
    if seconds is None:
        return "-"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172_800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} d"


def steps_served(queues: Sequence[str]) -> str:
    """``all 7`` for a worker serving every step (``--all``), else the names joined."""
    if set(ALL_STEPS) <= set(queues) and len(queues) == len(ALL_STEPS):
        return f"all {len(ALL_STEPS)}"
    return ", ".join(queues) or "-"


GONE_WORDS = (
    "gone = no word for one heartbeat interval (killed, frozen, or cut off from Redis); "
    "its row is its last state"
)
"""What a view says ``gone`` means, once, beside the table."""


def state_words(worker: WorkerInfo) -> str:
    """``running``; ``stopping: signal SIGTERM``; ``stopped: ...``; ``gone`` (see
    :data:`GONE_WORDS`)."""
    if worker.exit_reason and worker.state in ("stopping", "stopped"):
        return f"{worker.state}: {worker.exit_reason}"
    return worker.state


def lanes_words(worker: WorkerInfo) -> str:
    """``busy/idle/abandoned`` lane counts, e.g. ``2/5/0``."""
    return f"{worker.busy}/{worker.idle}/{worker.abandoned}"


def summary(view: WorkersView) -> str:
    """``3 running, 1 stopped, 2 gone`` over the workers shown (``of N`` when more are
    remembered than shown); ``no worker has published its state`` when none."""
    if not view.workers:
        return "no worker has published its state"
    counts = {"running": 0, "stopped": 0, "gone": 0}
    for w in view.workers:
        counts["running" if w.alive else w.state] += 1
    words = ", ".join(f"{n} {state}" for state, n in counts.items() if n or state == "running")
    more = f"; {len(view.workers)} of {view.total} shown" if view.total > len(view.workers) else ""
    return words + more
