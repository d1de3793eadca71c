"""End to end: real worker processes export their spans over OTLP/HTTP to a receiver in
this test, and every order's trace holds together through failures, a kill -9 and a
cancellation.

50 orders are placed by the real ``orders place``; injected transient failures retry
points attempts; a second points worker is killed with SIGKILL while it holds leases
(its jobs are reaped and redelivered to the other worker); one order is cancelled with
``orders cancel`` mid-flight. The receiver decodes each ``ExportTraceServiceRequest``
(opentelemetry-proto) and the test checks, from the spans alone: each order's spans
share one trace id, each attempt's parent is its job's creation context (the send span
whose context the record carries), the relay passes link to the rows they published,
and no root exists that is not one of the roots the design allows.
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import threading
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli_processes import app_for, run_orders, start_orders, stop, wait_until
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from sqlalchemy import select, update

from orders.domain.models import Inventory
from orders.domain.steps import COMPENSATION_STEPS, LOGISTICS, POINTS, STOCK
from orders.worker.faults import FaultConfig, FaultStore
from reliable_queue import explain
from workflows.models import StepStatus, Workflow, WorkflowStatus, WorkflowStep

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

ORDERS = 50
_NONE = SimpleNamespace(lease_token=None)
#: the spans that may be roots: an order's placement, a relay pass, a batch delivery
ROOTS = ("place order", "relay publish", "relay sweep")


@dataclass(frozen=True)
class Span:
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    attributes: dict
    links: tuple[tuple[str, str], ...]
    pid: int


@dataclass
class Receiver:
    """A loopback OTLP/HTTP trace receiver: every span it was sent, decoded."""

    spans: list[Span] = field(default_factory=list)
    requests: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take(self, body: bytes) -> None:
        request = ExportTraceServiceRequest.FromString(body)
        got = []
        for resource in request.resource_spans:
            attributes = {a.key: a.value for a in resource.resource.attributes}
            pid = attributes["process.pid"].int_value if "process.pid" in attributes else 0
            for scope in resource.scope_spans:
                for s in scope.spans:
                    got.append(
                        Span(
                            s.trace_id.hex(),
                            s.span_id.hex(),
                            s.parent_span_id.hex(),
                            s.name,
                            {a.key: _value(a.value) for a in s.attributes},
                            tuple((link.trace_id.hex(), link.span_id.hex()) for link in s.links),
                            pid,
                        )
                    )
        with self.lock:
            self.spans.extend(got)
            self.requests += 1


def _value(value):
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@pytest.fixture
def receiver() -> Iterator[tuple[Receiver, int]]:
    """``(receiver, port)``: the receiver serving ``POST /v1/traces`` on 127.0.0.1."""
    got = Receiver()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - the http.server name
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            if self.path != "/v1/traces":
                self.send_response(404)
                self.end_headers()
                return
            got.take(body)
            reply = ExportTraceServiceResponse().SerializeToString()
            self.send_response(200)
            self.send_header("Content-Type", "application/x-protobuf")
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield got, server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture
def env(cli_env, database_url, redis_url, key_prefix, catalog, receiver) -> dict[str, str]:
    _, port = receiver
    return dict(
        cli_env,
        ORDERS_DATABASE_URL=database_url,
        ORDERS_REDIS_URL=redis_url,
        ORDERS_QUEUE_PREFIX=key_prefix,
        ORDERS_LEASE_SECONDS="2",
        ORDERS_MAX_ATTEMPTS="30",
        ORDERS_BACKOFF_BASE_SECONDS="0.05",
        ORDERS_BACKOFF_MAX_SECONDS="0.3",
        ORDERS_RELAY_SWEEP_INTERVAL_SECONDS="0.5",
        OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{port}",
        OTEL_BSP_SCHEDULE_DELAY="100",
    )


def _steps(app) -> list[tuple[int, str, str, str, str | None]]:
    """``(order id, step, status, outcome, traceparent)`` of every step row."""
    with app.session_factory() as session:
        return list(
            session.execute(
                select(
                    Workflow.subject_id,
                    WorkflowStep.step,
                    WorkflowStep.status,
                    WorkflowStep.outcome,
                    WorkflowStep.traceparent,
                ).join(Workflow, Workflow.id == WorkflowStep.workflow_id)
            )
        )


def _all_done(app) -> bool:
    with app.session_factory() as session:
        statuses = list(session.scalars(select(Workflow.status)))
    return len(statuses) == ORDERS and all(s == WorkflowStatus.DONE for s in statuses)


def _cancel_one_in_flight(app, env) -> int:
    """Cancel an order whose stock is done and that is not complete yet: its
    compensations run as jobs of its trace."""
    cancelled: list[int] = []

    def cancelled_one() -> bool:
        rows = _steps(app)
        stocked = {
            o for o, step, status, outcome, _ in rows if step == STOCK and outcome == "deducted"
        }
        open_ = {o for o, _, status, _, _ in rows if status not in StepStatus.FINAL}
        if not stocked & open_:
            return False
        order_id = max(stocked & open_)  # the newest: the likeliest to be open still
        done = run_orders(["cancel", str(order_id), "--json"], env)  # raises: completed
        if json.loads(done)["compensations"]:
            cancelled.append(order_id)
            return True
        return False

    errors: list[str] = []

    def tried() -> bool:
        try:
            return cancelled_one()
        except Exception as exc:  # a cancel that came too late (the order completed)
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
            raise

    try:
        wait_until(tried, 60, "an order in flight to cancel", every=0.2)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; cancels tried: {errors[-3:]}") from None
    return cancelled[0]


def test_every_orders_trace_holds_through_retries_a_kill_and_a_cancellation(
    env, receiver, data_dir: Path
) -> None:
    got, _ = receiver
    app = app_for(env)
    with app.session_factory() as session, session.begin():  # no order ends out of stock
        session.execute(update(Inventory).values(on_hand=10**9, initial_on_hand=10**9))
    faults = FaultStore(app.redis, app.settings.queue_prefix)
    faults.set(POINTS, FaultConfig(fail_rate=0.3, delay_ms=150))
    logistics = app.queues[LOGISTICS]
    logistics.pause(reason="orders stay in flight until one is cancelled")
    survivor = start_orders(
        ["worker", "--all", "--concurrency", "1", "--batch-size", "10", "--no-metrics"],
        env,
        data_dir / "worker-a.log",
    )
    victim = start_orders(
        ["worker", POINTS, "--concurrency", "2", "--batch-size", "4", "--no-sweep",
         "--no-metrics"],
        env,
        data_dir / "worker-b.log",
    )  # fmt: skip
    try:
        placed = json.loads(
            run_orders(["place", "-n", str(ORDERS), "--source", "random", "--json"], env)
        )["order_ids"]
        assert len(placed) == ORDERS
        # kill -9 the second points worker while it holds leases: they are reaped and
        # its jobs delivered again to the first one
        points = app.queues[POINTS]
        wait_until(
            lambda: any(f":{victim.pid}:" in t for t in points.lease_tokens()),
            60,
            "the victim to hold a points lease",
            every=0.05,
        )
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(10)
        held = [
            job_id
            for job_id in points.ids_in("active")
            if f":{victim.pid}:" in ((explain(points, job_id) or _NONE).lease_token or "")
        ]
        assert held, "the victim died holding no lease"
        faults.set(POINTS, FaultConfig(fail_rate=0.3))
        cancelled = _cancel_one_in_flight(app, env)  # logistics paused: none completed
        logistics.resume()
        wait_until(lambda: _all_done(app), 90, "every order done")
        rows = _steps(app)
    finally:
        stop(victim)
        code = stop(survivor, timeout=30)  # its spans are exported at exit
        app.close()
    assert code == 0, (data_dir / "worker-a.log").read_text()[-3000:]
    _check(got.spans, rows, placed, cancelled, survivor.pid)
    redelivered = {
        s.attributes["messaging.message.id"]
        for s in got.spans
        if "reliable_queue.attempt" in s.attributes and s.pid == survivor.pid
    }
    assert set(held) <= redelivered  # the kill -9's jobs ran again in the survivor


def _check(spans: list[Span], rows, placed: list[int], cancelled: int, survivor: int) -> None:
    by_id = {s.span_id: s for s in spans}
    trace_of = {}
    for order_id, _, _, _, parent in rows:
        assert parent is not None, f"order {order_id} has a step row without a trace context"
        trace_of.setdefault(order_id, set()).add(parent[3:35])
    assert all(len(t) == 1 for t in trace_of.values()), "one trace per order"
    order_trace = {o: next(iter(t)) for o, t in trace_of.items()}
    assert sorted(order_trace) == sorted(placed)

    # each order's spans: its placement, the sends of its steps, their attempts
    placements = {s.attributes["orders.order_id"]: s for s in spans if s.name == "place order"}
    assert sorted(placements) == sorted(placed)
    sends = [s for s in spans if s.name.startswith("send ")]
    creation = {
        s.attributes["messaging.message.id"]: s
        for s in sends
        if not s.attributes.get("reliable_queue.duplicate")
    }
    attempts = [s for s in spans if "reliable_queue.attempt" in s.attributes]  # fmt: skip
    workflow_order = {}
    for s in sends:
        key = s.attributes["reliable_queue.idempotency_key"]
        owner = next(o for o, root in placements.items() if root.span_id == s.parent_id)
        workflow_order[key.split(":")[0]] = owner
        assert s.trace_id == order_trace[owner], f"{s.name} of order {owner} left its trace"
    per_order = defaultdict(set)
    for order_id, root in placements.items():
        per_order[order_id].add(root.trace_id)
    for s in sends:
        per_order[workflow_order[s.attributes["reliable_queue.idempotency_key"].split(":")[0]]].add(
            s.trace_id
        )
    for a in attempts:  # every attempt: a child of its job's send, never of an attempt
        send = creation.get(a.attributes["messaging.message.id"])
        assert send is not None, (
            f"attempt of job {a.attributes['messaging.message.id']} has no send"
        )
        assert a.parent_id == send.span_id and a.trace_id == send.trace_id
        per_order[
            workflow_order[send.attributes["reliable_queue.idempotency_key"].split(":")[0]]
        ].add(a.trace_id)
    for order_id in placed:
        assert per_order[order_id] == {order_trace[order_id]}, f"order {order_id}: several traces"

    # the routes were taken: retries, a redelivery after the kill, the cancellation
    outcomes = {a.attributes["reliable_queue.outcome"] for a in attempts}
    assert "retried" in outcomes and "acked" in outcomes
    assert any(a.attributes["reliable_queue.attempt"] > 1 and a.pid == survivor for a in attempts)
    compensations = [s for s in sends if s.name.removeprefix("send ") in COMPENSATION_STEPS]
    assert compensations and all(s.trace_id == order_trace[cancelled] for s in compensations)

    # relay passes: roots linking to the rows (each order's placement) they published
    passes = [s for s in spans if s.name in ("relay publish", "relay sweep")]
    assert passes and all(p.parent_id == "" and p.links for p in passes)
    linked = {span_id for p in passes for _, span_id in p.links}
    assert {root.span_id for root in placements.values()} <= linked
    for p in passes:
        for trace_id, span_id in p.links:
            assert by_id[span_id].name == "place order" and by_id[span_id].trace_id == trace_id

    # no orphan root: a span without a parent is a placement, a relay pass or a batch
    # delivery; every other span's parent was exported too
    for s in spans:
        if not s.parent_id:
            assert s.name in ROOTS or "messaging.batch.message_count" in s.attributes, s
        else:
            assert s.parent_id in by_id, f"{s.name}'s parent is missing"
