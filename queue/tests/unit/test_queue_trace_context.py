"""A job's creation context: the W3C value, its place in the record, its trip to a child."""

from __future__ import annotations

import orjson
import pytest

from reliable_queue import InvalidTraceContextError, RawJob, TaskRegistry, TraceContext
from reliable_queue.codec import decode_fields, decode_record, encode_record, trace_context_of
from reliable_queue.execution import Prepared, prepare

PARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_valid_traceparent_and_tracestate_make_a_context_with_its_ids() -> None:
    context = TraceContext(PARENT, "congo=t61rcWkgMzE")
    assert context.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert context.span_id == "b7ad6b7169203331"
    assert context.carrier() == {"traceparent": PARENT, "tracestate": "congo=t61rcWkgMzE"}
    assert TraceContext(PARENT).carrier() == {"traceparent": PARENT}


@pytest.mark.parametrize(
    "traceparent",
    [
        "",
        "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01",  # upper case
        "ff-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",  # version ff
        "00-00000000000000000000000000000000-b7ad6b7169203331-01",  # zero trace id
        "00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",  # zero span id
        PARENT + "-extra",
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331",
    ],
)
def test_a_traceparent_that_is_not_w3c_is_refused_and_parses_as_none(traceparent: str) -> None:
    with pytest.raises(InvalidTraceContextError, match="traceparent"):
        TraceContext(traceparent)
    assert TraceContext.parse(traceparent) is None


def test_a_bad_tracestate_is_refused_but_parse_keeps_the_traceparent_alone() -> None:
    for state in ("x" * 513, "a=\x1b[31m", "a=\u00e9"):
        with pytest.raises(InvalidTraceContextError, match="tracestate"):
            TraceContext(PARENT, state)
        assert TraceContext.parse(PARENT, state) == TraceContext(PARENT)
    assert TraceContext.parse(None) is None
    assert TraceContext.parse(42) is None  # type: ignore[arg-type]


def test_a_record_carries_its_context_and_an_old_record_without_one_still_decodes() -> None:
    context = TraceContext(PARENT, "k=v")
    record = decode_record(encode_record("ship", {"a": 1}, 5, 3, "key", context))
    assert record.trace_context == context
    assert (record.task, record.payload, record.idempotency_key) == ("ship", {"a": 1}, "key")
    plain = encode_record("ship", {"a": 1}, 5, 3, None)
    assert b'"c"' not in plain and b'"s"' not in plain  # no context: not one byte more
    # a record written before the field existed (these exact bytes)
    old = decode_record(b'{"t":"ship","p":{"a":1},"e":5,"m":3,"k":null}')
    assert old.trace_context is None and old.payload == {"a": 1}


@pytest.mark.parametrize("stored", ["garbage", 7, ["x"], {"traceparent": PARENT}, "00-" + "1" * 60])
def test_a_foreign_records_bad_context_reads_as_none_and_the_job_still_runs(stored) -> None:
    raw = orjson.dumps({"t": "ship", "p": {}, "e": 0, "m": 1, "c": stored, "s": 5})
    assert decode_record(raw).trace_context is None
    assert trace_context_of(raw) is None
    registry = TaskRegistry()
    registry.task("ship")(lambda payload, ctx: None)
    assert isinstance(prepare(RawJob("q", "j1", "1:w", 1, raw), registry), Prepared)


def test_the_context_is_read_apart_from_the_fields_a_worker_decodes_per_job() -> None:
    context = TraceContext(PARENT, "k=v")
    raw = encode_record("ship", {}, 1_000, 3, None, context)
    assert decode_fields(raw) == ("ship", {}, 1_000, 3, None)  # the worker's hot path
    assert trace_context_of(raw) == context
    assert trace_context_of(b"\xff not json") is None and trace_context_of(b"[1]") is None
