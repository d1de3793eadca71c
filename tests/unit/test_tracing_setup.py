"""Tracing is off unless configured; a bad setting is one warning; local files stay bounded."""

from __future__ import annotations

import io
import json
import logging
import os

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from orders.observability.logs import configure_logging
from orders.observability.trace_files import SpanFiles, read_spans, spans_of_line, traces_dir
from orders.observability.tracing import (
    LocalSpanExporter,
    MutedOnFailure,
    tracer_provider,
    tracing_config,
)


@pytest.mark.parametrize(
    ("environ", "local", "otlp"),
    [
        ({}, False, False),
        ({"ORDERS_TRACES": "local"}, True, False),
        ({"ORDERS_TRACES": " Local "}, True, False),
        ({"ORDERS_TRACES": "off"}, False, False),
        ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, False, True),
        ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, False, True),
        ({"OTEL_TRACES_EXPORTER": "otlp"}, False, True),
        ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}, False, False),
        ({"OTEL_SDK_DISABLED": "true", "ORDERS_TRACES": "local"}, False, False),
    ],
)
def test_tracing_is_on_only_where_a_setting_asks(environ, local, otlp) -> None:
    config = tracing_config(environ)
    assert (config.local, config.otlp, config.warnings) == (local, otlp, ())


@pytest.mark.parametrize(
    ("environ", "says"),
    [
        ({"ORDERS_TRACES": "loud\x1b[31m"}, "not 'local' or 'off'"),
        ({"ORDERS_TRACES_MAX_MB": "lots", "ORDERS_TRACES": "local"}, "not 1..100000"),
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "only 'otlp' is built in"),
        ({"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, "grpc"),
    ],
)
def test_a_bad_setting_is_a_warning_and_that_part_stays_off(environ, says) -> None:
    config = tracing_config(environ)
    assert len(config.warnings) == 1 and says in config.warnings[0]
    assert "\x1b" not in config.warnings[0]  # the value is shown escaped
    assert not config.otlp


def test_an_exporter_that_fails_is_said_once_and_muted(caplog) -> None:
    class Broken:
        calls = 0

        def export(self, spans):
            Broken.calls += 1
            raise ConnectionError("collector down")

    now = [0.0]
    muted = MutedOnFailure(Broken(), "OTLP", mute_seconds=30, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="orders.tracing"):
        for _ in range(5):
            assert muted.export([object()]) is SpanExportResult.FAILURE
        now[0] = 31.0
        muted.export([object()])  # tried again after the mute: fails again, still one line
    assert Broken.calls == 2 and muted.dropped == 6
    assert [r.getMessage()[:40] for r in caplog.records] == [
        "OTLP trace export failed (ConnectionErro"
    ]


def test_a_provider_that_cannot_start_is_one_warning_and_no_tracing(tmp_path, caplog) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    environ = {"ORDERS_TRACES": "local", "OTEL_TRACES_SAMPLER": "always_on"}
    with caplog.at_level(logging.WARNING):
        provider = tracer_provider(blocked, environ)
        assert provider is not None  # the folder is only made at the first export
        tracer = provider.get_tracer("t")
        with tracer.start_as_current_span("work"):
            pass
        assert provider.force_flush()
        assert tracer_provider(blocked, environ) is provider  # once per process
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "local trace export failed" in warnings[0].getMessage()


def _spans(n: int, name: str = "work") -> tuple[list, str]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("root") as root:
        for i in range(n):
            with tracer.start_as_current_span(name, attributes={"i": i, "text": "\x1b[31m"}):
                pass
    provider.shutdown()
    return list(exporter.get_finished_spans()), format(root.context.trace_id, "032x")


def test_local_spans_are_otlp_json_lines_read_back_by_trace(tmp_path) -> None:
    spans, trace_id = _spans(3)
    LocalSpanExporter(traces_dir(tmp_path), 1024 * 1024).export(spans)
    [path] = list(traces_dir(tmp_path).iterdir())
    assert oct(path.stat().st_mode & 0o777) in ("0o600", "0o644")  # the umask decides
    line = json.loads(path.read_bytes())
    first = line["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert first["traceId"] == trace_id and len(first["spanId"]) == 16  # OTLP/JSON: hex ids
    got = read_spans(traces_dir(tmp_path), [trace_id])
    assert [s.name for s in got] == ["root", "work", "work", "work"]
    assert got[1].attributes == {"i": 0, "text": "\x1b[31m"}  # kept raw: escaped when shown
    assert got[1].parent_id == got[0].span_id and got[0].parent_id == ""
    assert read_spans(traces_dir(tmp_path), ["0" * 31 + "1"]) == []
    assert read_spans(tmp_path / "missing", [trace_id]) == []


def test_a_line_that_does_not_parse_is_skipped() -> None:
    assert spans_of_line(b"{not json") == []
    assert spans_of_line(b'{"resourceSpans": 7}') == []
    assert spans_of_line(b"[]") == []


def test_the_folder_stays_within_its_budget_across_processes_files(tmp_path) -> None:
    folder = traces_dir(tmp_path)
    line = b"x" * 4000
    budget = 64 * 1024
    # three writers, as three processes would be (each names its files apart)
    writers = [SpanFiles(folder, budget, clock=lambda n=n: float(n)) for n in range(3)]
    for n in range(200):
        writers[n % 3].append(line)
    total = sum(p.stat().st_size for p in folder.iterdir())
    assert total <= budget + 3 * (budget // 8 + len(line))  # budget + one open file each
    assert {p.name.split("-")[2] for p in folder.iterdir()} == {"0", "1000", "2000"}


def test_a_json_log_line_carries_the_current_spans_ids() -> None:
    stream = io.StringIO()
    configure_logging("INFO", stream=stream, json_lines=True)
    provider = TracerProvider()
    with provider.get_tracer("t").start_as_current_span("work") as span:
        logging.getLogger("orders.test").info("inside")
    logging.getLogger("orders.test").info("outside")
    provider.shutdown()
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside["trace_id"] == format(span.context.trace_id, "032x")
    assert inside["span_id"] == format(span.context.span_id, "016x")
    assert "trace_id" not in outside and "span_id" not in outside


def test_nothing_is_imported_or_started_when_tracing_is_off(tmp_path) -> None:
    assert tracer_provider(tmp_path, {}) is None
    assert not os.path.exists(traces_dir(tmp_path))


def test_a_bad_batch_setting_is_one_warning_without_a_traceback(
    tmp_path, monkeypatch, caplog
) -> None:
    # the SDK reads OTEL_BSP_* from os.environ itself and logs a traceback for a bad one
    monkeypatch.setenv("ORDERS_TRACES", "local")
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "abc\x1b[31m")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "250")
    with caplog.at_level(logging.WARNING):
        provider = tracer_provider(tmp_path)
        assert provider is not None
        with provider.get_tracer("t").start_as_current_span("work") as span:
            trace_id = format(span.get_span_context().trace_id, "032x")
        assert provider.force_flush()
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    said = warnings[0].getMessage()
    assert "OTEL_BSP_MAX_QUEUE_SIZE" in said and "2048" in said and "\x1b" not in said
    assert warnings[0].exc_info is None
    assert read_spans(traces_dir(tmp_path), [trace_id])  # still traced, with the default


def test_batch_settings_are_read_and_a_bad_one_is_said_only_when_tracing_is_on() -> None:
    on = tracing_config({"ORDERS_TRACES": "local", "OTEL_BSP_EXPORT_TIMEOUT": "-1"})
    assert len(on.warnings) == 1 and "OTEL_BSP_EXPORT_TIMEOUT" in on.warnings[0]
    assert tracing_config({"OTEL_BSP_EXPORT_TIMEOUT": "-1"}).warnings == ()
    fast = tracing_config({"ORDERS_TRACES": "local", "OTEL_BSP_SCHEDULE_DELAY": " 250 "})
    assert fast.warnings == () and dict(fast.batch)["schedule_delay_millis"] == 250
