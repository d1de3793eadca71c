"""Is a worker process alive: its heartbeat runs and no lane is stuck (``/livez``).

A lane is stuck when it has not turned its loop for longer than an idle lane
ever waits (``max_block_seconds``, the Redis retry backoff, a turn behind another
lane's batch of at most one time limit) plus ``heartbeats`` heartbeat intervals,
or when its batch has run past the time limit by that many heartbeats (the
limit should have freed it: an abandoned lane stuck in a handler counts too).
Redis or the database being away never makes a process dead: a lane retrying
them turns its loop. Pure: the caller hands in the lanes and the clock. See
[ADR 0042](../../docs/adr/0042-worker-gauges-from-live-slots.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from reliable_queue.worker import LaneView

REDIS_BACKOFF_MAX_SECONDS = 5.0
"""Longest a lane sleeps between two tries of an unreachable Redis (``reliable_queue.worker``)."""


@dataclass(frozen=True)
class StallBounds:
    """How long a lane may go without progress.

    Attributes:
        heartbeat_seconds: the worker's heartbeat interval (a third of the lease).
        time_limit_seconds: the step time limit (0: none; a busy lane is then never
            stuck, however long its batch runs).
        max_block_seconds: longest an idle lane blocks on Redis for work.
        heartbeats: grace, in heartbeat intervals (>= 1).
    """

    heartbeat_seconds: float
    time_limit_seconds: float
    max_block_seconds: float
    heartbeats: int = 3

    @property
    def grace(self) -> float:
        """``heartbeats`` heartbeat intervals, seconds."""
        return self.heartbeats * self.heartbeat_seconds

    @property
    def idle_seconds(self) -> float:
        """Longest a lane not running a batch may go without turning its loop, seconds."""
        waits = max(self.max_block_seconds, REDIS_BACKOFF_MAX_SECONDS)
        return waits + self.time_limit_seconds + self.grace

    @property
    def busy_seconds(self) -> float | None:
        """Longest a batch may run before its lane counts as stuck, seconds (None: no
        time limit, no bound)."""
        return self.time_limit_seconds + self.grace if self.time_limit_seconds > 0 else None


@dataclass(frozen=True)
class Verdict:
    """A probe's answer.

    Attributes:
        ok: healthy.
        lines: one line per check or problem, for the response body.
    """

    ok: bool
    lines: tuple[str, ...]

    def body(self) -> str:
        """The response body: the lines, then ``ok`` or ``fail``."""
        return "".join(f"{line}\n" for line in (*self.lines, "ok" if self.ok else "fail"))


def stuck_lanes(lanes: Sequence[LaneView], now: float, bounds: StallBounds) -> list[str]:
    """One line per lane that is stuck, or that died while the worker serves.

    Args:
        lanes: the worker's lanes (``Worker.lanes``).
        now: the lanes' monotonic clock, seconds.
        bounds: the limits above.
    """
    problems: list[str] = []
    for lane in lanes:
        if not lane.alive:
            if not lane.abandoned:
                problems.append(f"lane of {lane.queue} ended")
            continue
        if lane.busy_since is not None:
            ran, limit = now - lane.busy_since, bounds.busy_seconds
            if limit is not None and ran > limit:
                kind = "abandoned lane" if lane.abandoned else "lane"
                problems.append(
                    f"{kind} of {lane.queue} has run one batch for {ran:.0f}s "
                    f"(time limit {bounds.time_limit_seconds:g}s)"
                )
        elif not lane.abandoned and now - lane.progress_at > bounds.idle_seconds:
            problems.append(
                f"lane of {lane.queue} made no progress for {now - lane.progress_at:.0f}s"
            )
    return problems


def worker_liveness(
    lanes: Sequence[LaneView],
    *,
    heartbeat_alive: bool,
    stopping: bool,
    now: float,
    bounds: StallBounds,
) -> Verdict:
    """The ``/livez`` answer of a worker process.

    Args:
        lanes: ``Worker.lanes()``; empty before the worker started (then alive).
        heartbeat_alive: the lease heartbeat thread runs (checked once lanes exist).
        stopping: the worker is shutting down (its lanes end on purpose).
        now: the lanes' monotonic clock, seconds.
        bounds: see :class:`StallBounds`.
    """
    if not lanes:
        return Verdict(True, ("starting",))
    if stopping:
        return Verdict(True, ("stopping: in-flight jobs finish",))
    problems = [] if heartbeat_alive else ["lease heartbeat stopped"]
    problems += stuck_lanes(lanes, now, bounds)
    serving = sum(1 for lane in lanes if lane.alive and not lane.abandoned)
    return Verdict(not problems, (f"{serving} lane(s) serving", *problems))
