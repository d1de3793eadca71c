"""Recent samples of the queues' counters and depths, for rates and charts.

Redis keeps lifetime counters per queue; a rate is the difference between two
samples divided by the time between them. ``orders watch`` samples once a
second, the web dashboard every two seconds in a background thread.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from reliable_queue import QueueStats

log = logging.getLogger("orders.sampler")


@dataclass(frozen=True)
class Sample:
    """One reading of every queue.

    Attributes:
        at: monotonic clock, seconds (for differences).
        wall: epoch seconds (for display).
        queues: queue name -> its stats.
    """

    at: float
    wall: float
    queues: dict[str, QueueStats]

    def counter(self, queue: str, name: str) -> int:
        """A lifetime counter of ``queue`` (0 if unknown)."""
        s = self.queues.get(queue)
        return s.counters.get(name, 0) if s is not None else 0

    def depth(self, queue: str) -> int:
        """Jobs of ``queue`` waiting or running (ready + delayed + active)."""
        s = self.queues.get(queue)
        return s.ready + s.delayed + s.active if s is not None else 0


class Sampler:
    """Keeps the samples of the last ``keep`` seconds.

    Args:
        read: returns queue name -> QueueStats (may raise; the sample is skipped).
        keep: seconds of history kept.
        clock / wall: monotonic and epoch clocks, seconds (injectable).
    """

    def __init__(
        self,
        read: Callable[[], dict[str, QueueStats]],
        *,
        keep: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.read = read
        self.keep = keep
        self.clock = clock
        self.wall = wall
        self._samples: deque[Sample] = deque()
        self._lock = threading.Lock()
        self.last_error: str | None = None

    def sample(self) -> Sample:
        """Read the queues now and remember the reading.

        Raises:
            Exception: whatever ``read`` raises (nothing is remembered).
        """
        s = Sample(self.clock(), self.wall(), self.read())
        with self._lock:
            self._samples.append(s)
            while self._samples and s.at - self._samples[0].at > self.keep:
                self._samples.popleft()
        return s

    def samples(self) -> list[Sample]:
        """Every remembered sample, oldest first."""
        with self._lock:
            return list(self._samples)

    def latest(self) -> Sample | None:
        """The newest sample, or None before the first."""
        with self._lock:
            return self._samples[-1] if self._samples else None

    def rate(self, queue: str, counter: str, window: float) -> float | None:
        """Per-second increase of ``counter`` over about the last ``window`` seconds.

        Uses the oldest sample inside the window and the newest one; None until
        two samples at least half a second apart exist. A counter that went
        down (Redis data lost) counts from zero.
        """
        with self._lock:
            if len(self._samples) < 2:
                return None
            last = self._samples[-1]
            first = next(s for s in self._samples if last.at - s.at <= window)
            if first is last:
                first = self._samples[-2]
        span = last.at - first.at
        if span < 0.5:
            return None
        now, then = last.counter(queue, counter), first.counter(queue, counter)
        return (now - then if now >= then else now) / span

    def series(
        self, queue: str, counter: str, *, min_span: float = 0.5
    ) -> list[tuple[float, float]]:
        """``(epoch seconds, per-second rate)`` between successive samples at least
        ``min_span`` seconds apart (closer ones are merged, so rates stay smooth)."""
        out: list[tuple[float, float]] = []
        samples = self.samples()
        if not samples:
            return out
        anchor = samples[0]
        for s in samples[1:]:
            span = s.at - anchor.at
            if span < min_span:
                continue
            now, then = s.counter(queue, counter), anchor.counter(queue, counter)
            out.append((s.wall, (now - then if now >= then else now) / span))
            anchor = s
        return out

    def run(self, interval: float, stop: threading.Event) -> None:
        """Sample every ``interval`` seconds until ``stop`` is set.

        A failure is logged once and kept in ``last_error`` until a sample succeeds.
        """
        while not stop.is_set():
            try:
                self.sample()
                self.last_error = None
            except Exception as exc:
                if self.last_error is None:
                    log.warning("sampling the queues failed: %s", exc)
                self.last_error = str(exc) or type(exc).__name__
            stop.wait(interval)

    def start(self, interval: float, stop: threading.Event) -> threading.Thread:
        """:meth:`run` in a daemon thread; returns the started thread."""
        thread = threading.Thread(
            target=self.run, args=(interval, stop), name="queue-sampler", daemon=True
        )
        thread.start()
        return thread
