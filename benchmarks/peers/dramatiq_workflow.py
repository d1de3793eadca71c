"""The order workflow on Dramatiq, built as Dramatiq's documentation recommends.

Imported by ``dramatiq benchmarks.peers.dramatiq_workflow`` (the worker processes) and by
the benchmark (the producer). One order: the ``stock`` actor deducts the parts, then runs
a group of ``notification``, ``points`` and ``logistics`` whose completion callback,
``complete``, marks the order completed. Each actor runs the domain's own effect
(``order_steps``). Doc pages followed (Dramatiq 2.2):

- Composition with groups: https://dramatiq.io/cookbook.html#composition
- Group completion callbacks (``group.add_completion_callback``) need the
  ``GroupCallbacks`` middleware with a rate limiter backend, here Redis (its barrier
  counts the finished members):
  https://dramatiq.io/reference.html#dramatiq.group.add_completion_callback and
  https://dramatiq.io/reference.html#dramatiq.middleware.GroupCallbacks. The
  ``Results`` middleware is what ``group.wait`` and ``get_results`` read; nothing here
  waits on a group or reads a result, so it is left out (it would only add writes).
- The Redis broker acks a message after it was processed; messages of a worker that
  died are requeued (at-least-once, the effects are idempotent):
  https://dramatiq.io/reference.html#dramatiq.brokers.redis.RedisBroker
- Retries with exponential backoff, matched to orderflow's five attempts (0.5 s base,
  30 s cap): https://dramatiq.io/guide.html#message-retries and
  https://dramatiq.io/reference.html#dramatiq.middleware.Retries
- Worker processes and threads (``--processes``, ``--threads``), and readiness from the
  ``after_worker_boot`` middleware hook: https://dramatiq.io/guide.html and
  https://dramatiq.io/reference.html#dramatiq.Middleware.after_worker_boot
"""

from __future__ import annotations

from typing import Any

import dramatiq
from dramatiq import Middleware, group
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import GroupCallbacks
from dramatiq.rate_limits.backends import RedisBackend

from orders.domain.effects import OUT_OF_STOCK
from orders.domain.steps import LOGISTICS, NOTIFICATION, POINTS, STOCK

from .base import redis_url
from .order_steps import complete as complete_order
from .order_steps import mark_ready, run_step

ATTEMPTS = 5
"""Runs of a message at most, as orderflow's default ``max_attempts``."""
RETRY: dict[str, Any] = {"max_retries": ATTEMPTS - 1, "min_backoff": 500, "max_backoff": 30_000}
"""Actor options of the Retries middleware (backoff in milliseconds)."""


class Ready(Middleware):
    """Says a worker process has booted (``INCR bench:e2e:ready``)."""

    def after_worker_boot(self, broker: Any, worker: Any) -> None:
        """Called once per worker process, its threads started."""
        mark_ready(redis_url())


broker = RedisBroker(url=redis_url())
broker.add_middleware(GroupCallbacks(RedisBackend(url=redis_url())))
broker.add_middleware(Ready())
dramatiq.set_broker(broker)


@dramatiq.actor(actor_name="orders.stock", **RETRY)
def stock(order_id: int) -> None:
    """Deduct the order's parts, then fan out the other steps (not for an order out of
    stock: it skips them, as in orderflow)."""
    if run_step(STOCK, order_id) == OUT_OF_STOCK:
        return
    steps = group(
        [notification.message(order_id), points.message(order_id), logistics.message(order_id)]
    )
    steps.add_completion_callback(complete.message(order_id))
    steps.run()


@dramatiq.actor(actor_name="orders.notification", **RETRY)
def notification(order_id: int) -> None:
    """Send the order's confirmation."""
    run_step(NOTIFICATION, order_id)


@dramatiq.actor(actor_name="orders.points", **RETRY)
def points(order_id: int) -> None:
    """Credit the order's points."""
    run_step(POINTS, order_id)


@dramatiq.actor(actor_name="orders.logistics", **RETRY)
def logistics(order_id: int) -> None:
    """Schedule the order's shipment."""
    run_step(LOGISTICS, order_id)


@dramatiq.actor(actor_name="orders.complete", **RETRY)
def complete(order_id: int) -> None:
    """The group's completion callback: every step is done, the order is completed."""
    complete_order(order_id)


def start(order_id: int) -> None:
    """Send one order's workflow (its first message; the workers send the rest)."""
    stock.send(order_id)
