"""The workers section of ``orders status`` and ``orders watch``: each worker process, and
what its busy lanes run (Sidekiq's Busy page, in a terminal of 80 columns).

Every cell is cleaned (``render.fitted_table``): ids, hosts and reasons come from Redis
and are untrusted. On a narrow terminal the less telling columns are left out first,
then the state (or task) is cut with ``…``; a job id is folded, never cut.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table

from orders.cli.render import fitted_table, short_ids, when
from orders.observability.workers import (
    GONE_WORDS,
    ago,
    lanes_words,
    state_words,
    steps_served,
    summary,
)
from reliable_queue import WorkersView

STATE_ROOM = 24
"""Columns the state keeps before another column gives way (``stopped: signal SIGTERM``)."""


def workers_table(view: WorkersView, *, limit: int | None = None) -> Table:
    """One row per worker process: id, pid, steps served, lanes busy/idle/abandoned, jobs
    done, time since its last heartbeat, start, state (with why it stopped).

    Args:
        view: the reading.
        limit: most rows (None: every worker of the view).
    """
    shown = view.workers if limit is None else view.workers[:limit]
    rows = [
        [
            w.worker_id,
            str(w.pid if w.pid is not None else "-"),
            steps_served(w.queues),
            lanes_words(w),
            str(w.counts.get("succeeded", 0)),
            ago(w.heartbeat_age),
            when(w.started_at, date=False),
            state_words(w),
        ]
        for w in shown
    ]
    if not rows:
        rows.append(["-", "", "(start one: orders worker --all)", "", "", "", "", ""])
    more = len(view.workers) - len(shown)
    caption = (
        "b/i/a = lanes busy / idle / abandoned after a time limit; done = jobs acked since "
        "it started; last beat = time since its last heartbeat; times UTC"
        + (f"; {GONE_WORDS}" if any(w.state == "gone" for w in shown) else "")
        + (f"; {more} more: orders status --json" if more > 0 else "")
    )
    return fitted_table(
        ["worker", "pid", "steps", "b/i/a", "done", "last beat", "started", "state"],
        rows,
        flex=7,
        title=f"workers ({summary(view)})",
        caption=caption,
        right=(1, 4, 5),
        drop=(6, 1, 4, 5),
        flex_min=STATE_ROOM,
    )


def busy_lanes_table(view: WorkersView) -> Table | None:
    """The busy and abandoned lanes of the workers still serving: the batch each runs
    (its first job, task and size) and since when; None when no lane is busy."""
    lanes = [
        (w, lane)
        for w in view.workers
        if w.alive
        for lane in w.lanes
        if lane.state != "idle" and lane.job_id is not None
    ]
    if not lanes:
        return None
    short = short_ids(lane.job_id for _, lane in lanes if lane.job_id)
    rows = [
        [
            w.worker_id,
            lane.queue,
            short[lane.job_id] if lane.job_id else "-",
            str(lane.jobs),
            when(lane.since, date=False),
            ago(lane.running_seconds),
            "abandoned" if lane.state == "abandoned" else (lane.task or "-"),
        ]
        for w, lane in lanes
    ]
    return fitted_table(
        ["worker", "step", "first job", "jobs", "since", "running", "task"],
        rows,
        flex=6,
        title="busy lanes (the batch each runs)",
        caption="one job in full: orders explain JOB_ID",
        right=(3, 5),
        keep=(2,),
        drop=(4, 0),
    )


def workers_section(view: WorkersView, *, limit: int | None = None) -> list[Any]:
    """The workers table and, when a lane is busy, the busy lanes table."""
    parts: list[Any] = [workers_table(view, limit=limit)]
    busy = busy_lanes_table(view)
    if busy is not None:
        parts.append(busy)
    return parts
