"""A job's creation context survives every route back to waiting: it lives in the record."""

from __future__ import annotations

import time

from queue_helpers import wait_until

from reliable_queue import EnqueueRequest, Queue, TraceContext, audit
from reliable_queue.codec import decode_record

CONTEXT = TraceContext("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "rojo=1")
OTHER = TraceContext("00-11111111111111111111111111111111-2222222222222222-01")


def _fetch_one(queue: Queue, **kwargs):
    result = wait_until(lambda: queue.fetch(1, **kwargs).jobs, timeout=5.0)
    return result[0]


def _context(job) -> TraceContext | None:
    return decode_record(job.record).trace_context


def _enqueued(queue: Queue, **kwargs) -> str:
    return queue.enqueue("t", {"n": 1}, trace_context=CONTEXT, **kwargs)


def test_a_retry_with_backoff_and_its_promotion_keep_the_context(make_queue) -> None:
    queue = make_queue()
    job_id = _enqueued(queue)
    first = _fetch_one(queue)
    assert _context(first) == CONTEXT
    assert queue.nack(first.lease, delay=0.05, error="boom")
    again = _fetch_one(queue)  # promoted from delayed by the fetch
    assert (again.job_id, again.attempt, _context(again)) == (job_id, 2, CONTEXT)


def test_a_reaped_lease_redelivers_the_job_with_its_context(make_queue) -> None:
    queue = make_queue()
    job_id = _enqueued(queue)
    _fetch_one(queue, lease_seconds=0.05)  # a worker that died holding it
    time.sleep(0.1)
    again = _fetch_one(queue)
    assert (again.job_id, _context(again)) == (job_id, CONTEXT)


def test_a_job_handed_back_at_shutdown_keeps_its_context(make_queue) -> None:
    queue = make_queue()
    _enqueued(queue)
    assert queue.release([_fetch_one(queue).lease]) == 1
    assert _context(_fetch_one(queue)) == CONTEXT


def test_a_redriven_dead_letter_continues_its_original_context(make_queue) -> None:
    queue = make_queue()
    job_id = _enqueued(queue)
    assert queue.dead(_fetch_one(queue).lease, "error", error="no")
    assert queue.dead_letters.redrive(ids=[job_id]).redriven == [job_id]
    again = _fetch_one(queue)
    assert (again.job_id, _context(again)) == (job_id, CONTEXT)


def test_an_orphan_the_audit_repairs_keeps_its_context(make_queue) -> None:
    queue = make_queue()
    job_id = _enqueued(queue)
    queue.client.lrem(queue.keys.key("ready"), 0, job_id)  # in no structure: an orphan
    assert audit(queue, repair=True).repaired == 1
    assert _context(_fetch_one(queue)) == CONTEXT


def test_a_duplicate_enqueue_keeps_the_first_jobs_context(make_queue) -> None:
    queue = make_queue()
    first = _enqueued(queue, idempotency_key="7:stock")
    request = EnqueueRequest("t", {"n": 1}, idempotency_key="7:stock", trace_context=OTHER)
    assert queue.enqueue_many([request]) == [first]
    assert _context(_fetch_one(queue)) == CONTEXT


def test_a_job_enqueued_without_a_context_has_none(make_queue) -> None:
    queue = make_queue()
    queue.enqueue("t", {"n": 1})
    assert _context(_fetch_one(queue)) is None
