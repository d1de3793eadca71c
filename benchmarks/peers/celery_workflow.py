"""The order workflow on Celery, built as Celery's documentation recommends.

Imported by ``celery -A benchmarks.peers.celery_workflow worker`` (the worker processes)
and by the benchmark (the producer). One order is a chain into a chord: ``stock``, then
``notification``, ``points`` and ``logistics`` in parallel, then ``complete`` (the chord
callback) marks the order completed. Each task runs the domain's own effect
(``order_steps``). Doc pages followed (Celery 5.6):

- Canvas, chains and chords; chords need a result backend, the header tasks must not
  ignore their results, and the Redis backend counts a chord's finished parts itself:
  https://docs.celeryq.dev/en/stable/userguide/canvas.html#chords
- Redis as broker and result backend:
  https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html
- At-least-once: ``task_acks_late`` (a message is acked after its task ran; one whose
  node dies stays unacked and the Redis transport restores it after its visibility
  timeout, so tasks must be idempotent; the effects are) and
  ``task_reject_on_worker_lost`` (the same for a prefork child that dies):
  https://docs.celeryq.dev/en/stable/userguide/tasks.html#Task.acks_late,
  https://docs.celeryq.dev/en/stable/userguide/configuration.html#task-reject-on-worker-lost
  and https://docs.celeryq.dev/en/stable/getting-started/backends-and-brokers/redis.html#visibility-timeout
- Prefetch for many short tasks ("this number should be large ... say 64, or 128"):
  https://docs.celeryq.dev/en/stable/userguide/optimizing.html#prefetch-limits
- Results only where they are used (``ignore_result`` on the chain's first task and the
  chord callback): https://docs.celeryq.dev/en/stable/userguide/tasks.html#Task.ignore_result
- Retries with exponential backoff and jitter, matched to orderflow's five attempts:
  https://docs.celeryq.dev/en/stable/userguide/tasks.html#automatic-retry-for-known-exceptions
- Ending a chain early: raise ``Ignore`` (the message is acked, no callback runs), as the
  out-of-stock order skips its other steps in orderflow too:
  https://docs.celeryq.dev/en/stable/userguide/tasks.html#ignore
- Several worker nodes on one machine, each named with ``--hostname`` ("there's even some
  evidence to support that having multiple worker instances running, may perform better
  than having a single worker"), here one per worker process of the other libraries:
  https://docs.celeryq.dev/en/stable/userguide/workers.html#starting-the-worker and
  https://docs.celeryq.dev/en/stable/userguide/workers.html#concurrency
- The threads pool (``--pool threads``, ``--concurrency`` tasks at a time per node), for
  tasks that mostly wait on Redis and the database:
  https://docs.celeryq.dev/en/stable/userguide/concurrency/index.html
- Readiness from the ``worker_ready`` signal, once per node:
  https://docs.celeryq.dev/en/stable/userguide/signals.html#worker-ready
"""

from __future__ import annotations

from typing import Any

from celery import Celery, chord
from celery.exceptions import Ignore
from celery.signals import worker_ready

from orders.domain.effects import OUT_OF_STOCK
from orders.domain.steps import LOGISTICS, NOTIFICATION, POINTS, STOCK

from .base import redis_url
from .order_steps import complete as complete_order
from .order_steps import mark_ready, run_step

PREFETCH_MULTIPLIER = 64
"""Messages reserved per child process: the docs' advice for many short tasks."""
ATTEMPTS = 5
"""Runs of a task at most, as orderflow's default ``max_attempts``."""

app = Celery("orders_bench", broker=redis_url(), backend=redis_url())
app.conf.update(
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=PREFETCH_MULTIPLIER,
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)

_RETRY: dict[str, Any] = {
    "autoretry_for": (Exception,),
    "max_retries": ATTEMPTS - 1,
    "retry_backoff": True,
    "retry_backoff_max": 30,
    "retry_jitter": True,
}


@app.task(name="orders.stock", ignore_result=True, **_RETRY)
def stock(order_id: int) -> None:
    """Deduct the order's parts; an order out of stock ends its chain here."""
    if run_step(STOCK, order_id) == OUT_OF_STOCK:
        raise Ignore()


@app.task(name="orders.notification", **_RETRY)
def notification(order_id: int) -> str:
    """Send the order's confirmation (a chord header task: its result is kept)."""
    return run_step(NOTIFICATION, order_id)


@app.task(name="orders.points", **_RETRY)
def points(order_id: int) -> str:
    """Credit the order's points (a chord header task)."""
    return run_step(POINTS, order_id)


@app.task(name="orders.logistics", **_RETRY)
def logistics(order_id: int) -> str:
    """Schedule the order's shipment (a chord header task)."""
    return run_step(LOGISTICS, order_id)


@app.task(name="orders.complete", ignore_result=True, **_RETRY)
def complete(order_id: int) -> None:
    """The chord callback: every step is done, the order is completed."""
    complete_order(order_id)


def order_workflow(order_id: int) -> Any:
    """The canvas of one order: ``stock | chord([notification, points, logistics], complete)``
    (immutable signatures: each task takes the order id only)."""
    header = [notification.si(order_id), points.si(order_id), logistics.si(order_id)]
    return stock.si(order_id) | chord(header, complete.si(order_id))


def start(order_id: int) -> None:
    """Send one order's workflow (the chain's first message; the worker sends the rest)."""
    order_workflow(order_id).apply_async()


def end_turn() -> None:
    """Drop the producer's subscriptions to chord results, between two benchmark turns.

    Building a chord's header in the producer registers the header tasks' results as
    pending with the Redis result backend, which subscribes to each one's channel and
    keeps them until they are read; nothing here reads them. Inside the timed run that
    is Celery's own cost and stays; between turns the subscriptions (and the pending
    results behind them) are dropped, so one turn's leftovers do not load the next.
    """
    backend: Any = app.backend
    consumer = backend.result_consumer
    consumer.stop()  # closes the pubsub connection: its subscriptions go with it
    consumer._pubsub = None
    consumer.subscribed_to.clear()
    for pending in backend._pending_results:
        pending.clear()


@worker_ready.connect
def _ready(**_: Any) -> None:
    mark_ready(redis_url())
