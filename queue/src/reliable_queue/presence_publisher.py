"""The thread that publishes one worker process's state (``reliable_queue.presence``).

One script call (``lua/presence.lua``) per period, whatever the worker drains; the
first at start, a last one when the worker stops (its ``stopped`` state and why),
after which nothing more is published. A failed publish is logged once until one
succeeds again, and never stops the worker. See
[ADR 0043](../../../../docs/adr/0043-workers-publish-their-state.md).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import redis

from .cluster import RedisClient
from .errors import QueueError
from .keys import WorkerKeys
from .limits import WORKERS_KEPT
from .presence import GONE_KEPT_SECONDS, WorkerState
from .scripts import ScriptRunner

log = logging.getLogger("reliable_queue.worker")


class PresencePublisher(threading.Thread):
    """Publishes ``state()`` every ``every`` seconds until ``stop`` is set.

    Args:
        client: redis-py client or cluster (borrowed, never closed).
        prefix: the queues' prefix (the keys are :class:`~reliable_queue.keys.WorkerKeys`).
        worker_id: the worker's id (at most 200 bytes).
        state: builds the state to publish now (called in this thread).
        every: seconds between publishes (``presence.publish_every``).
        stop: ends the thread (its last state is published by :meth:`last`).
    """

    def __init__(
        self,
        client: RedisClient,
        prefix: str,
        worker_id: str,
        state: Callable[[], WorkerState],
        every: float,
        stop: threading.Event,
    ) -> None:
        super().__init__(name="presence", daemon=True)
        self.keys = WorkerKeys(prefix)
        self.worker_id = worker_id
        self.state = state
        self.every = every
        self.stop = stop
        self._runner = ScriptRunner(client)
        self._lock = threading.Lock()  # one publish at a time; none after the last
        self._closed = False
        self._failing = False

    def _send(self, state: WorkerState) -> bool:
        try:
            self._runner.run(
                "presence",
                [self.keys.seen, self.keys.states],
                [self.worker_id, state.encode(), int(GONE_KEPT_SECONDS * 1000), WORKERS_KEPT],
            )
        except (QueueError, redis.RedisError) as exc:
            if not self._failing:
                log.warning("publishing this worker's state failed (%s); trying again", exc)
            self._failing = True
            return False
        if self._failing:
            log.info("publishing this worker's state works again")
        self._failing = False
        return True

    def publish(self) -> bool:
        """Publish the state now, unless the last one was published; True if it was sent."""
        with self._lock:
            if self._closed:
                return False
            return self._send(self.state())

    def last(self, state: WorkerState) -> bool:
        """Publish the worker's last state (``stopped``, and why); nothing after it.

        Returns:
            True if it was sent (False: Redis failed, or a last state was sent already).
        """
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            return self._send(state)

    def run(self) -> None:
        """Publish at once, then every ``every`` seconds until ``stop``; an unexpected
        error (a bug building the state) is logged and the next period tries again."""
        while True:
            try:
                self.publish()
            except Exception:
                log.exception("publishing this worker's state failed")
            if self.stop.wait(self.every):
                return
