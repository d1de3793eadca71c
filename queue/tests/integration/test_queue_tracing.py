"""Producer and attempt spans on a real Redis: attempts are siblings under their job's send."""

from __future__ import annotations

import threading

from opentelemetry.trace import SpanKind
from queue_helpers import FAST, running_worker, wait_until

from reliable_queue import (
    AttemptTracing,
    EnqueueRequest,
    PermanentError,
    Queue,
    RetryPolicy,
    TaskRegistry,
    Throttled,
)
from reliable_queue.codec import decode_record
from reliable_queue.tracing import trace_context_of


def _hex(span_id: int) -> str:
    return format(span_id, "016x")


def _named(exporter, name: str) -> list:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_a_send_is_the_child_of_the_jobs_context_linked_to_the_operation_publishing(
    redis_client, key_prefix, spans
) -> None:
    tracer, exporter = spans
    order = tracer.start_span("place order")
    context = trace_context_of(order)
    queue = Queue(redis_client, "stock", prefix=key_prefix, tracer=tracer)
    with tracer.start_as_current_span("relay publish") as relay:
        [job_id] = queue.enqueue_many(
            [EnqueueRequest("t", {}, idempotency_key="1:stock", trace_context=context)]
        )
        again = queue.enqueue_many(
            [EnqueueRequest("t", {}, idempotency_key="1:stock", trace_context=context)]
        )
    order.end()
    first, duplicate = _named(exporter, "send stock")
    assert first.kind is SpanKind.PRODUCER and first.parent.span_id == order.context.span_id
    assert [link.context.span_id for link in first.links] == [relay.context.span_id]
    assert first.attributes["messaging.message.id"] == job_id
    assert first.attributes["reliable_queue.idempotency_key"] == "1:stock"
    assert again == [job_id] and duplicate.attributes["reliable_queue.duplicate"] is True
    # the record holds the send's own context: every attempt becomes its child
    [job] = queue.fetch(1).jobs
    stored = decode_record(job.record).trace_context
    assert stored is not None and stored.span_id == _hex(first.context.span_id)
    assert stored.trace_id == format(order.context.trace_id, "032x")


def test_a_send_without_a_context_is_the_child_of_the_current_span(
    redis_client, key_prefix, spans
) -> None:
    tracer, exporter = spans
    queue = Queue(redis_client, "q", prefix=key_prefix, tracer=tracer)
    with tracer.start_as_current_span("caller") as caller:
        queue.enqueue("t", {})
    [send] = _named(exporter, "send q")
    assert send.parent.span_id == caller.context.span_id and not send.links


def test_every_attempt_of_a_job_is_a_sibling_under_its_send(
    redis_client, key_prefix, spans
) -> None:
    tracer, exporter = spans
    registry = TaskRegistry()
    runs: dict[int, int] = {}
    lock = threading.Lock()

    @registry.task("flaky", retry=RetryPolicy(max_attempts=3, base_delay=0.02, jitter=False))
    def flaky(payload, ctx) -> None:
        with lock:
            runs[payload["n"]] = runs.get(payload["n"], 0) + 1
        if ctx.attempt < 3 and payload["n"] == 0:
            raise ValueError("transient")
        if payload["n"] == 1:
            raise PermanentError("bad order")

    queue = Queue(redis_client, "w", prefix=key_prefix, settings=FAST, tracer=tracer)
    order = tracer.start_span("order")
    job_ids = queue.enqueue_many(
        [EnqueueRequest("flaky", {"n": n}, trace_context=trace_context_of(order)) for n in (0, 1)]
    )
    order.end()
    tracing = AttemptTracing(tracer)
    with running_worker(
        redis_client,
        ["w"],
        registry,
        prefix=key_prefix,
        settings=FAST,
        middleware=[tracing.middleware],
        hooks=tracing.hooks(),
    ):
        wait_until(lambda: len(_named(exporter, "process w")) == 4, timeout=15)
    sends = {s.attributes["messaging.message.id"]: s for s in _named(exporter, "send w")}
    attempts = _named(exporter, "process w")
    flaky0 = sorted(
        (s for s in attempts if s.attributes["messaging.message.id"] == job_ids[0]),
        key=lambda s: s.attributes["reliable_queue.attempt"],
    )
    assert [s.attributes["reliable_queue.attempt"] for s in flaky0] == [1, 2, 3]
    assert [s.attributes["reliable_queue.outcome"] for s in flaky0] == [
        "retried",
        "retried",
        "acked",
    ]
    for span in attempts:  # siblings: each one's parent is its job's send, none another's
        assert span.parent.span_id == sends[span.attributes["messaging.message.id"]].context.span_id
        assert span.context.trace_id == order.context.trace_id
    [dead] = [s for s in attempts if s.attributes["messaging.message.id"] == job_ids[1]]
    assert dead.attributes["reliable_queue.outcome"] == "dead-lettered"
    assert dead.attributes["reliable_queue.dead_reason"] == "error"


def test_a_batch_delivery_is_one_root_span_linked_to_every_job(
    redis_client, key_prefix, spans
) -> None:
    tracer, exporter = spans
    registry = TaskRegistry()
    registry.task("sum", batch=True)(lambda items: [None] * len(items))
    queue = Queue(redis_client, "b", prefix=key_prefix, settings=FAST, tracer=tracer)
    orders = [tracer.start_span(f"order {n}") for n in range(5)]
    contexts = [trace_context_of(order) for order in orders]
    queue.enqueue_many([EnqueueRequest("sum", {"n": 1}, trace_context=c) for c in contexts])
    for order in orders:
        order.end()
    tracing = AttemptTracing(tracer)
    with running_worker(
        redis_client,
        ["b"],
        registry,
        prefix=key_prefix,
        settings=FAST,
        batch_size=10,
        middleware=[tracing.middleware],
        hooks=tracing.hooks(),
    ):
        wait_until(lambda: len(_named(exporter, "process b")) == 6, timeout=15)
    [batch] = [s for s in _named(exporter, "process b") if s.parent is None]
    assert batch.attributes["messaging.batch.message_count"] == 5
    sends = {s.context.span_id for s in _named(exporter, "send b")}
    assert {link.context.span_id for link in batch.links} == sends
    jobs = [s for s in _named(exporter, "process b") if s is not batch]
    traces = {o.context.trace_id for o in orders}
    assert {s.context.trace_id for s in jobs} == traces  # each in its own order's trace
    for span in jobs:
        assert span.parent.span_id in sends
        assert [link.context.span_id for link in span.links] == [batch.context.span_id]
        assert span.attributes["reliable_queue.outcome"] == "acked"


def test_a_throttled_run_ends_its_span_throttled_and_past_its_budget_as_it_settled(
    redis_client, key_prefix, spans
) -> None:
    tracer, exporter = spans
    registry = TaskRegistry()
    runs = {0: 0, 1: 0}

    @registry.task("busy", retry=RetryPolicy(base_delay=0.02, jitter=False))
    def busy(payload, ctx) -> None:
        runs[payload["n"]] += 1
        if payload["n"] == 1 or runs[0] < 3:  # job 1 is throttled every time
            raise Throttled(0.02, "429 Too Many Requests")

    settings = FAST.model_copy(update={"max_throttles": 2})
    queue = Queue(redis_client, "h", prefix=key_prefix, settings=settings, tracer=tracer)
    ok_id, dead_id = queue.enqueue_many(
        [EnqueueRequest("busy", {"n": n}, max_attempts=2) for n in (0, 1)]
    )
    tracing = AttemptTracing(tracer)
    with running_worker(
        redis_client,
        ["h"],
        registry,
        prefix=key_prefix,
        settings=settings,
        middleware=[tracing.middleware],
        hooks=tracing.hooks(),
    ):
        wait_until(lambda: len(_named(exporter, "process h")) == 9, timeout=15)
    attempts = _named(exporter, "process h")

    def outcomes(job_id: str) -> list[str]:
        mine = [s for s in attempts if s.attributes["messaging.message.id"] == job_id]
        return [
            s.attributes["reliable_queue.outcome"] for s in sorted(mine, key=lambda s: s.start_time)
        ]

    assert outcomes(ok_id) == ["throttled", "throttled", "acked"]
    # past its budget of 2 a throttle is an ordinary failure: retried, then dead-lettered
    assert outcomes(dead_id) == [*["throttled"] * 2, "retried", *["throttled"] * 2, "dead-lettered"]
    [dead] = [
        s
        for s in attempts
        if s.attributes["messaging.message.id"] == dead_id
        and s.attributes["reliable_queue.outcome"] == "dead-lettered"
    ]
    assert dead.attributes["reliable_queue.dead_reason"] == "retries_exhausted"
    throttled = [s for s in attempts if s.attributes["reliable_queue.outcome"] == "throttled"]
    assert all(s.status.is_ok for s in throttled)  # a deferral is not a failure
    assert {s.attributes["reliable_queue.attempt"] for s in throttled} == {1, 2}  # uncharged
