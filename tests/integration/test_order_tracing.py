"""An order's spans share one trace from its placement to its last attempt, on every route.

The application is built with an SDK tracer provider whose spans land in memory;
placement, the relay, the sweep, a worker and a cancellation run for real on this
test's database and Redis keys.
"""

from __future__ import annotations

import random
import time

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import select, update

from orders.app.bootstrap import build
from orders.app.cancellation import cancel
from orders.app.migrate import upgrade_database
from orders.app.order_traces import OrderSpans
from orders.app.placement import place, write_orders
from orders.app.settings import Settings
from orders.domain.handlers import StepRequest, handle_step
from orders.domain.steps import ALL_STEPS, POINTS, RETURN_STOCK, STOCK
from orders.worker.faults import FaultConfig, FaultStore
from orders.worker.relay_loop import sweep_once
from orders.worker.runner import attempt_tracing, build_worker
from reliable_queue.codec import decode_record
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep
from workflows.outbox_admin import retry_rows
from workflows.relay import publish_dispatched
from workflows.uow import UnitOfWork


@pytest.fixture
def traced(database_url, redis_client, key_prefix):
    """``(app, exporter)``: an app with fast retries whose spans land in ``exporter``."""
    upgrade_database(database_url)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = build(
        Settings(
            database_url=database_url,
            queue_prefix=key_prefix,
            max_attempts=30,
            backoff_base_seconds=0.05,
            backoff_max_seconds=0.2,
            relay_republish_after_seconds=0.01,
        ),
        redis_override=redis_client,
        tracer_provider=provider,
    )
    try:
        yield app, exporter
    finally:
        app.close()
        provider.shutdown()


def _hex(span_id: int) -> str:
    return format(span_id, "016x")


def _trace(span) -> str:
    return format(span.context.trace_id, "032x")


def _ids(traceparent: str | None) -> str | None:
    """``<trace id>-<span id>`` of a traceparent (its flags left out)."""
    return None if traceparent is None else traceparent[3:52]


def _ids_of(span) -> str:
    return f"{_trace(span)}-{_hex(span.context.span_id)}"


def _rows(app, order_id: int) -> list[WorkflowStep]:
    with app.session_factory() as session:
        return list(
            session.scalars(
                select(WorkflowStep)
                .join(Workflow, Workflow.id == WorkflowStep.workflow_id)
                .where(Workflow.subject_id == order_id)
            )
        )


def _place(app, count: int, *, publish: bool = True) -> list[int]:
    result = place(
        app.session_factory,
        count,
        source="random",
        rng=random.Random(7),
        publisher=app.publisher if publish else None,
        tracer=app.tracer("orders.placement"),
    )
    return result.order_ids


def _wait(predicate, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _workflow_done(app, order_id: int) -> bool:
    with app.session_factory() as session:
        status = session.scalar(select(Workflow.status).where(Workflow.subject_id == order_id))
    return status == WorkflowStatus.DONE


def _order_spans(exporter) -> dict[int, object]:
    return {
        s.attributes["orders.order_id"]: s
        for s in exporter.get_finished_spans()
        if s.name == "place order"
    }


@pytest.mark.slow
def test_every_span_of_an_order_shares_its_trace_and_attempts_are_siblings(traced, catalog) -> None:
    app, exporter = traced
    FaultStore(app.redis, app.settings.queue_prefix).set(POINTS, FaultConfig(fail_rate=0.7))
    order_ids = _place(app, 6)
    tracing = attempt_tracing(app)
    worker = build_worker(
        app, list(ALL_STEPS), fault_rng=random.Random(5), tracing=tracing, batch_size=2
    )
    worker.start()
    try:
        _wait(lambda: all(_workflow_done(app, o) for o in order_ids))
    finally:
        worker.request_stop()
        worker.join(15)
        tracing.close()
    spans = exporter.get_finished_spans()
    placed = _order_spans(exporter)
    sends = {s.attributes["messaging.message.id"]: s for s in spans if s.name.startswith("send ")}
    attempts = [s for s in spans if s.name.startswith("process ") and s.parent is not None]
    retried = [s for s in attempts if s.attributes["reliable_queue.outcome"] == "retried"]
    assert retried, "the injected failures retried points attempts"
    for order_id in order_ids:
        root = placed[order_id]
        assert root.parent is None  # no caller's span: the order starts its trace
        rows = _rows(app, order_id)
        assert {_ids(row.traceparent) for row in rows} == {_ids_of(root)}
        keys = {f"{row.workflow_id}:{row.step}" for row in rows}
        mine = [s for s in sends.values() if s.attributes["reliable_queue.idempotency_key"] in keys]
        ran = [row for row in rows if row.status != StepStatus.SKIPPED]  # (out of stock)
        assert len(mine) == len(ran) >= 1  # every step that ran, the released ones too
        for send in mine:
            assert send.parent.span_id == root.context.span_id and _trace(send) == _trace(root)
        for attempt in (s for s in attempts if s.attributes["messaging.message.id"] in
                        {m.attributes["messaging.message.id"] for m in mine}):  # fmt: skip
            job = attempt.attributes["messaging.message.id"]
            assert attempt.parent.span_id == sends[job].context.span_id  # never another attempt
            assert _trace(attempt) == _trace(root)
    relay = [s for s in spans if s.name == "relay publish"]
    assert relay and all(s.parent is None for s in relay)
    linked = {link.context.span_id for s in relay for link in s.links}
    assert {s.context.span_id for s in placed.values()} <= linked  # a link per row's order
    batches = [s for s in spans if s.name.startswith("process ") and s.parent is None]
    for batch in batches:
        assert batch.attributes["messaging.batch.message_count"] == len(batch.links) > 1


def test_a_cancelled_orders_compensations_belong_to_its_trace(traced, make_draft, catalog):
    app, exporter = traced
    spans = OrderSpans.start(app.tracer("orders.placement"), 1, "random")
    with UnitOfWork(app.session_factory) as uow:
        [placed], first = write_orders(uow.session, [make_draft()], traces=spans.contexts)
        spans.placed([placed.order_id])
        uow.commit()
    spans.end()
    publish_dispatched(app.session_factory, app.publisher, first)
    handle_step(app.session_factory, StepRequest(placed.workflow_id, placed.order_id, STOCK, 1))
    cancel(
        app.session_factory,
        app.publisher,
        placed.order_id,
        tracer=app.tracer("orders.cancellation"),
    )
    root = _order_spans(exporter)[placed.order_id]
    [undo] = [row for row in _rows(app, placed.order_id) if row.step == RETURN_STOCK]
    assert _ids(undo.traceparent) == _ids_of(root)
    [send] = [s for s in exporter.get_finished_spans() if s.name == f"send {RETURN_STOCK}"]
    assert send.parent.span_id == root.context.span_id
    [relay] = [s for s in exporter.get_finished_spans() if s.name == "relay publish"]
    assert relay.parent is None  # the placement's publish had no tracer: only the cancel's
    assert [link.context.span_id for link in relay.links] == [root.context.span_id]


def test_the_sweep_republishing_a_lost_job_stays_in_the_orders_trace(traced, catalog) -> None:
    app, exporter = traced
    [order_id] = _place(app, 1)
    root = _order_spans(exporter)[order_id]
    queue = app.queues[STOCK]
    [first] = [s for s in exporter.get_finished_spans() if s.name == f"send {STOCK}"]
    assert queue.evict_key_for_chaos("waiting") == 1  # Redis lost the job (keyed: ADR 0033)
    time.sleep(0.05)
    assert sweep_once(app).republished == 1
    sweeps = [s for s in exporter.get_finished_spans() if s.name == "relay sweep"]
    [again] = [
        s for s in exporter.get_finished_spans() if s.name == f"send {STOCK}" and s is not first
    ]
    assert again.parent.span_id == root.context.span_id
    assert again.attributes["messaging.message.id"] != first.attributes["messaging.message.id"]
    [sweep] = sweeps
    assert sweep.parent is None and sweep.attributes["workflows.relay.republish"] is True
    assert [link.context.span_id for link in sweep.links] == [root.context.span_id]


def test_a_row_put_back_by_outbox_retry_is_published_in_the_orders_trace(traced, catalog):
    app, exporter = traced
    [order_id] = _place(app, 1, publish=False)  # rows pending: the sweep's to publish
    root = _order_spans(exporter)[order_id]
    with app.session_factory() as session, session.begin():
        session.execute(
            update(WorkflowStep)
            .where(WorkflowStep.step == STOCK)
            .values(status=StepStatus.UNPUBLISHABLE, publish_attempts=8)
        )
        session.execute(update(Workflow).values(status=WorkflowStatus.BLOCKED))
    retry_rows(app.session_factory)  # `orders outbox retry`
    assert sweep_once(app).published == 1
    [send] = [s for s in exporter.get_finished_spans() if s.name == f"send {STOCK}"]
    assert send.parent.span_id == root.context.span_id and _trace(send) == _trace(root)


def test_tracing_off_carries_a_callers_context_without_recording(
    database_url, redis_client, key_prefix, catalog
) -> None:
    upgrade_database(database_url)
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = build(
        Settings(database_url=database_url, queue_prefix=key_prefix), redis_override=redis_client
    )
    try:
        with provider.get_tracer("caller").start_as_current_span("http request") as caller:
            [order_id] = _place(app, 1)
        assert {_ids(row.traceparent) for row in _rows(app, order_id)} == {_ids_of(caller)}
        [job] = app.queues[STOCK].fetch(1).jobs
        assert _ids(decode_record(job.record).trace_context.traceparent) == _ids_of(caller)
        assert [s.name for s in exporter.get_finished_spans()] == ["http request"]
    finally:
        app.close()
        provider.shutdown()
