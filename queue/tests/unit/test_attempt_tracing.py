"""The worker's tracing piece without Redis: outcomes, settlements, time-outs, batches."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from reliable_queue import AttemptTracing, JobContext, RawJob, TraceContext, WorkerHooks
from reliable_queue.codec import encode_record
from reliable_queue.execution import Dead, Retry, Succeeded
from reliable_queue.job import Lease

PARENT = TraceContext("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")


@pytest.fixture
def traced():
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield AttemptTracing(provider.get_tracer("t")), exporter
    provider.shutdown()


_CREATED: dict[str, TraceContext | None] = {}


def _ctx(job_id: str = "j1", attempt: int = 1, parent: TraceContext | None = PARENT) -> JobContext:
    _CREATED[job_id] = parent
    return JobContext(job_id, "stock", "orders.stock", attempt, 5, "9:w", 9, 0.0, None)


def _job(ctx: JobContext) -> RawJob:
    record = encode_record(ctx.task, {}, 0, 5, None, _CREATED.get(ctx.job_id))
    return RawJob(ctx.queue, ctx.job_id, ctx.lease_token, ctx.attempt, record)


def _run(tracing: AttemptTracing, ctxs: list[JobContext], errors=None) -> None:
    tracing.after_fetch([_job(ctx) for ctx in ctxs])  # as the worker calls it: first
    items = [({"order_id": 1}, ctx) for ctx in ctxs]
    results = errors or [None] * len(items)
    assert tracing.middleware.around(items, lambda chosen: results) == results


def test_an_attempt_is_a_consumer_span_child_of_its_jobs_creation_context(traced) -> None:
    tracing, exporter = traced
    ctx = _ctx(attempt=3)
    _run(tracing, [ctx])
    assert exporter.get_finished_spans() == ()  # open until its settlement's reply
    tracing.on_outcome(_job(ctx), Succeeded(Lease("j1", "9:w")))
    tracing.on_settled("stock", "ack", [Lease("j1", "9:w")], [])
    [span] = exporter.get_finished_spans()
    assert span.name == "process stock" and span.kind is SpanKind.CONSUMER
    assert format(span.parent.span_id, "016x") == PARENT.span_id
    assert format(span.context.trace_id, "032x") == PARENT.trace_id
    assert span.attributes["messaging.system"] == "reliable_queue"
    assert span.attributes["messaging.destination.name"] == "stock"
    assert span.attributes["messaging.message.id"] == "j1"
    assert span.attributes["messaging.operation.type"] == "process"
    assert span.attributes["reliable_queue.attempt"] == 3
    assert span.attributes["reliable_queue.lease_token"] == "9:w"
    assert span.attributes["reliable_queue.outcome"] == "acked"
    assert span.status.status_code is StatusCode.UNSET


def test_a_refused_ack_ends_the_span_as_stale_and_failed(traced) -> None:
    tracing, exporter = traced
    ctx = _ctx()
    _run(tracing, [ctx])
    tracing.on_outcome(_job(ctx), Succeeded(Lease("j1", "9:w")))
    tracing.on_settled("stock", "ack", [Lease("j1", "9:w")], ["j1"])
    [span] = exporter.get_finished_spans()
    assert span.attributes["reliable_queue.outcome"] == "stale ack refused"
    assert span.status.status_code is StatusCode.ERROR


@pytest.mark.parametrize(
    ("outcome", "word", "reason"),
    [
        (Retry(Lease("j1", "9:w"), 0.5, "ValueError: boom", ""), "retried", None),
        (Dead(Lease("j1", "9:w"), "retries_exhausted", "ValueError: boom", ""), "dead-lettered",
         "retries_exhausted"),
    ],
)  # fmt: skip
def test_a_failed_attempt_carries_its_outcome_error_and_exception(traced, outcome, word, reason):
    tracing, exporter = traced
    ctx = _ctx()
    _run(tracing, [ctx], errors=[ValueError("boom")])
    tracing.on_outcome(_job(ctx), outcome)
    tracing.on_settled("stock", "nack" if word == "retried" else "dead", [Lease("j1", "9:w")], [])
    [span] = exporter.get_finished_spans()
    assert span.attributes["reliable_queue.outcome"] == word
    assert span.attributes.get("reliable_queue.dead_reason") == reason
    assert span.attributes["error.type"] == "ValueError"
    assert span.status.status_code is StatusCode.ERROR
    assert [e.name for e in span.events] == ["exception"]


def test_a_duplicate_the_application_absorbed_is_told_as_such(traced) -> None:
    tracing, exporter = traced
    ctx = _ctx()
    _run(tracing, [ctx])
    tracing.note(ctx, "duplicate absorbed")
    tracing.on_outcome(_job(ctx), Succeeded(Lease("j1", "9:w")))
    tracing.on_settled("stock", "ack", [Lease("j1", "9:w")], [])
    assert exporter.get_finished_spans()[0].attributes["reliable_queue.outcome"] == (
        "duplicate absorbed"
    )


def test_a_time_out_ends_the_span_at_once_and_a_late_settlement_changes_nothing(traced) -> None:
    tracing, exporter = traced
    ctx = _ctx()
    _run(tracing, [ctx])
    tracing.on_attempt_lost("stock", Lease("j1", "9:w"), "timed_out")
    tracing.on_outcome(_job(ctx), Retry(Lease("j1", "9:w"), 1.0, "TimeLimitExceeded: x", ""))
    tracing.on_settled("stock", "nack", [Lease("j1", "9:w")], [])
    [span] = exporter.get_finished_spans()
    assert span.attributes["reliable_queue.outcome"] == "timed out"
    assert span.status.status_code is StatusCode.ERROR


def test_a_batch_call_is_one_root_span_linking_every_job_and_linked_from_each(traced) -> None:
    tracing, exporter = traced
    other = TraceContext("00-11111111111111111111111111111111-2222222222222222-01")
    ctxs = [_ctx("j1"), _ctx("j2", parent=other), _ctx("j3", parent=None)]
    _run(tracing, ctxs)
    [batch] = exporter.get_finished_spans()  # ends with its call; the jobs' at settlement
    assert batch.parent is None and batch.name == "process stock"
    assert batch.attributes["messaging.batch.message_count"] == 3
    linked = {format(link.context.span_id, "016x") for link in batch.links}
    assert linked == {PARENT.span_id, other.span_id}  # a job with no context links nothing
    tracing.on_settled("stock", "ack", [Lease(c.job_id, c.lease_token) for c in ctxs], [])
    jobs = [s for s in exporter.get_finished_spans() if s is not batch]
    assert {s.attributes["messaging.message.id"] for s in jobs} == {"j1", "j2", "j3"}
    for span in jobs:
        assert [link.context.span_id for link in span.links] == [batch.context.span_id]
    by_id = {s.attributes["messaging.message.id"]: s for s in jobs}
    assert format(by_id["j2"].parent.span_id, "016x") == other.span_id
    assert by_id["j3"].parent is None  # no creation context: its own root


def test_released_jobs_and_those_left_at_close_are_ended_once(traced) -> None:
    tracing, exporter = traced
    a, b = _ctx("j1"), _ctx("j2")
    _run(tracing, [a])
    _run(tracing, [b])
    tracing.on_settled("stock", "release", [Lease("j1", "9:w")], [])
    assert tracing.close() == 1
    assert tracing.close() == 0
    outcomes = {
        s.attributes["messaging.message.id"]: s.attributes["reliable_queue.outcome"]
        for s in exporter.get_finished_spans()
    }
    assert outcomes == {"j1": "released", "j2": "unsettled"}


def test_its_hooks_run_after_the_workers_own(traced) -> None:
    tracing, exporter = traced
    calls: list[str] = []
    base = WorkerHooks(on_outcome=lambda job, outcome: calls.append(job.job_id))
    hooks = tracing.hooks(base)
    ctx = _ctx()
    _run(tracing, [ctx])
    hooks.on_outcome(_job(ctx), Succeeded(Lease("j1", "9:w")))
    hooks.on_settled("stock", "ack", [Lease("j1", "9:w")], [])
    assert calls == ["j1"] and len(exporter.get_finished_spans()) == 1
    assert base.on_settled is None  # the worker's own hooks are not changed
