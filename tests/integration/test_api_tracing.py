"""POST /api/v1/orders continues the caller's W3C trace (``traceparent``): the order's
``place order`` span and its step rows are in the caller's trace; without the header, or
with an invalid one, the order starts a trace of its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from api_world import BASE, ENV_TOKEN, ApiWorld, tokens_for
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sqlalchemy import Engine, select
from starlette.testclient import TestClient

from orders.app.bootstrap import build
from orders.app.settings import Settings
from orders.web.app import create_app
from orders.web.settings import WebSettings
from workflows.models import WorkflowStep

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
CALLER_SPAN = "00f067aa0ba902b7"
ORDER = {"customer_id": 1, "lines": [{"part_id": 10, "quantity": 1}]}


@pytest.fixture
def traced_world(
    engine: Engine,
    redis_client: redis.Redis,
    key_prefix: str,
    tmp_path: Path,
    catalog: dict[int, int],
) -> Iterator[tuple[ApiWorld, InMemorySpanExporter]]:
    """The API with tracing on: its spans land in the exporter."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = Settings(data_dir=tmp_path / "data", queue_prefix=key_prefix)
    app = build(
        settings, redis_override=redis_client, engine_override=engine, tracer_provider=provider
    )
    web = create_app(
        app,
        WebSettings(token=ENV_TOKEN, api_rate_per_second=10_000, api_burst=10_000),
        multiproc=tmp_path / "metrics",
        sample=False,
    )
    try:
        with TestClient(web, base_url=BASE, client=("127.0.0.1", 50000)) as client:
            yield ApiWorld(app, client, tokens_for(app)), exporter
    finally:
        app.close()
        provider.shutdown()


def place(world: ApiWorld, headers: dict[str, str]) -> dict:
    reply = world.client.post(
        "/api/v1/orders", json=ORDER, headers={**world.as_role("placer"), **headers}
    )
    assert reply.status_code == 201, reply.text
    return reply.json()


def order_span(exporter: InMemorySpanExporter, order_id: int):
    [span] = [
        s
        for s in exporter.get_finished_spans()
        if s.name == "place order" and s.attributes["orders.order_id"] == order_id
    ]
    return span


def step_traceparents(world: ApiWorld, workflow_id: int) -> set[str | None]:
    with world.app.session_factory() as session:
        return set(
            session.scalars(
                select(WorkflowStep.traceparent).where(WorkflowStep.workflow_id == workflow_id)
            )
        )


def test_an_api_order_continues_the_callers_traceparent(traced_world) -> None:
    world, exporter = traced_world
    body = place(
        world,
        {"traceparent": f"00-{TRACE_ID}-{CALLER_SPAN}-01", "tracestate": "shop=checkout"},
    )
    span = order_span(exporter, body["id"])
    assert format(span.context.trace_id, "032x") == TRACE_ID
    assert format(span.parent.span_id, "016x") == CALLER_SPAN and span.parent.is_remote
    assert span.attributes["orders.source"] == "api"
    own = f"00-{TRACE_ID}-{format(span.context.span_id, '016x')}-01"
    assert step_traceparents(world, body["workflow_id"]) == {own}
    # the stock job carries the order's trace: its producer span is in the caller's trace
    [send] = [s for s in exporter.get_finished_spans() if s.name == "send stock"]
    assert format(send.context.trace_id, "032x") == TRACE_ID


@pytest.mark.parametrize("header", [None, "not-a-traceparent", f"00-{'0' * 32}-{CALLER_SPAN}-01"])
def test_without_a_valid_traceparent_an_api_order_is_a_root(traced_world, header) -> None:
    world, exporter = traced_world
    body = place(world, {} if header is None else {"traceparent": header})
    span = order_span(exporter, body["id"])
    assert span.parent is None
    assert format(span.context.trace_id, "032x") != TRACE_ID
    [row_context] = step_traceparents(world, body["workflow_id"])
    assert row_context is not None and row_context[3:35] == format(span.context.trace_id, "032x")
