"""Tracing of one process: off unless configured; one warning, never a crash, when misconfigured.

:func:`tracing_config` reads the environment (pure): ``ORDERS_TRACES=local`` writes
spans into the data dir (``orders.observability.trace_files``), and the standard
``OTEL_*`` variables turn on OTLP/HTTP export (``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``..._TRACES_ENDPOINT``, or ``OTEL_TRACES_EXPORTER=otlp``; ``OTEL_SDK_DISABLED=true``
turns everything off). :func:`tracer_provider` builds the SDK provider for it, once
per process, with a batch processor per exporter (``OTEL_BSP_*``), the sampler of
``OTEL_TRACES_SAMPLER`` and the resource of ``OTEL_SERVICE_NAME`` /
``OTEL_RESOURCE_ATTRIBUTES``. An exporter that fails is muted for a while and said
once. Reasoning: docs/adr/0036 and docs/adr/0037.
"""

from __future__ import annotations

import atexit
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:  # the SDK is imported only when tracing is on
    from opentelemetry.sdk.trace.export import SpanExporter

log = logging.getLogger("orders.tracing")

#: ``ORDERS_TRACES`` values that turn the local exporter on / leave it off
LOCAL = "local"
_OFF = ("", "off", "none", "0", "false")
#: seconds an exporter that failed is not called again (its spans are dropped)
MUTE_SECONDS = 30.0
#: the OTLP protocol this build exports with
PROTOCOL = "http/protobuf"
#: seconds a process's exit waits for its last spans to be exported before giving up
EXIT_SECONDS = 2.0
#: ``OTEL_BSP_*`` variable -> (``BatchSpanProcessor`` argument, the SDK's default)
BATCH_SETTINGS = {
    "OTEL_BSP_MAX_QUEUE_SIZE": ("max_queue_size", 2048),
    "OTEL_BSP_SCHEDULE_DELAY": ("schedule_delay_millis", 5000),
    "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": ("max_export_batch_size", 512),
    "OTEL_BSP_EXPORT_TIMEOUT": ("export_timeout_millis", 30000),
}


@dataclass(frozen=True)
class TracingConfig:
    """What this process traces to.

    Attributes:
        local: write spans into the data dir's ``traces`` folder.
        otlp: export spans over OTLP/HTTP (the exporter reads its ``OTEL_*``).
        budget: most bytes of the local folder.
        batch: ``BatchSpanProcessor`` arguments from ``OTEL_BSP_*`` (name, value) pairs,
            every one given (the SDK's default for a bad value), so the SDK reads none.
        warnings: what was misconfigured (each said once, as a warning).
    """

    local: bool = False
    otlp: bool = False
    budget: int = 64 * 1024 * 1024
    batch: tuple[tuple[str, int], ...] = field(
        default=tuple(BATCH_SETTINGS[name] for name in BATCH_SETTINGS)
    )
    warnings: tuple[str, ...] = field(default=())

    @property
    def on(self) -> bool:
        """Whether any span is recorded."""
        return self.local or self.otlp


def tracing_config(environ: Mapping[str, str]) -> TracingConfig:
    """Read the tracing settings from ``environ`` (never raises).

    Args:
        environ: the environment (``os.environ``).

    Returns:
        The :class:`TracingConfig`; its ``warnings`` name each bad value and what
        was done instead (that part of tracing is off).
    """
    warnings: list[str] = []
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return TracingConfig()
    mode = environ.get("ORDERS_TRACES", "").strip().lower()
    local = mode == LOCAL
    if not local and mode not in _OFF:
        warnings.append(
            f"ORDERS_TRACES={_shown(mode)} is not 'local' or 'off': local traces are off"
        )
    budget = 64
    raw_budget = environ.get("ORDERS_TRACES_MAX_MB", "").strip()
    if raw_budget:
        try:
            budget = int(raw_budget)
            if not 1 <= budget <= 100_000:
                raise ValueError
        except ValueError:
            budget = 64
            warnings.append(f"ORDERS_TRACES_MAX_MB={_shown(raw_budget)} is not 1..100000: using 64")
    otlp = _otlp(environ, warnings)
    batch = _batch(environ, warnings if local or otlp else [])
    return TracingConfig(local, otlp, budget * 1024 * 1024, batch, tuple(warnings))


def _batch(environ: Mapping[str, str], warnings: list[str]) -> tuple[tuple[str, int], ...]:
    """The batch processor's arguments from ``OTEL_BSP_*``: a value that is not a whole
    number >= 1 is a warning and the SDK's default (the SDK would log a traceback)."""
    batch = []
    for name, (argument, default) in BATCH_SETTINGS.items():
        raw = environ.get(name, "").strip()
        value = default
        if raw:
            try:
                value = int(raw)
                if value < 1:
                    raise ValueError
            except ValueError:
                value = default
                warnings.append(f"{name}={_shown(raw)} is not a whole number >= 1: using {default}")
        batch.append((argument, value))
    return tuple(batch)


def _otlp(environ: Mapping[str, str], warnings: list[str]) -> bool:
    """Whether the standard variables ask for OTLP export (and this build can do it)."""
    names = [
        n.strip().lower() for n in environ.get("OTEL_TRACES_EXPORTER", "").split(",") if n.strip()
    ]
    endpoint = environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or environ.get(
        "OTEL_EXPORTER_OTLP_ENDPOINT"
    )
    unknown = [n for n in names if n not in ("otlp", "none")]
    if unknown:
        warnings.append(
            f"OTEL_TRACES_EXPORTER names {_shown(','.join(unknown))}: only 'otlp' is built in"
        )
    wanted = "otlp" in names or (not names and bool(endpoint))
    if not wanted:
        return False
    protocol = (
        environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
        or environ.get("OTEL_EXPORTER_OTLP_PROTOCOL")
        or PROTOCOL
    ).strip()
    if protocol != PROTOCOL:
        warnings.append(
            f"OTEL_EXPORTER_OTLP_PROTOCOL={_shown(protocol)}: only {PROTOCOL} is built in; "
            "OTLP export is off"
        )
        return False
    return True


def _shown(value: str) -> str:
    """A setting's value as a warning shows it: escaped, at most 40 characters."""
    return ascii(value[:40])[1:-1]


class MutedOnFailure:
    """A span exporter that never raises, is muted for a while after a failure, and says
    so once per run of failures (the SDK's own exporter logs are quiet meanwhile).

    Args:
        exporter: the real exporter.
        label: names it in the warning (``OTLP``, ``local``).
        mute_seconds: how long batches are dropped after a failure.
        clock: monotonic seconds.
    """

    def __init__(
        self,
        exporter: Any,
        label: str,
        mute_seconds: float = MUTE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._exporter = exporter
        self._label = label
        self._mute = mute_seconds
        self._clock = clock
        self._until = 0.0
        self._failing = False
        self._abandoned = False
        self.dropped = 0
        self._lock = threading.Lock()

    def export(self, spans: Sequence[Any]) -> Any:
        """Export ``spans``; a failure (returned or raised) mutes the exporter."""
        from opentelemetry.sdk.trace.export import SpanExportResult

        with self._lock:
            if self._abandoned or self._clock() < self._until:
                self.dropped += len(spans)
                return SpanExportResult.FAILURE
        try:
            result = self._exporter.export(spans)
            error = None if result is SpanExportResult.SUCCESS else "the export was refused"
        except Exception as exc:  # an exporter must never take the process down
            result, error = SpanExportResult.FAILURE, f"{type(exc).__name__}: {exc}"
        with self._lock:
            if error is None:
                self._failing = False
                return result
            self._until = self._clock() + self._mute
            self.dropped += len(spans)
            first, self._failing = not self._failing, True
        if first:
            log.warning(
                "%s trace export failed (%s); spans are dropped for %.0f s at a time until "
                "it works again, and work goes on",
                self._label,
                error[:300],
                self._mute,
            )
        return result

    def shutdown(self) -> None:
        """Shut the real exporter down (its errors are logged, never raised)."""
        try:
            self._exporter.shutdown()
        except Exception as exc:
            log.debug("%s exporter shutdown: %s", self._label, exc)

    def abandon(self) -> None:
        """Drop every batch from now on and stop the real exporter's retries (the
        process is exiting and has waited long enough)."""
        with self._lock:
            self._abandoned = True
        self.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Flush the real exporter, if it can."""
        try:
            return bool(self._exporter.force_flush(timeout_millis))
        except Exception:
            return False


class LocalSpanExporter:
    """A span exporter writing OTLP/JSON lines through :class:`SpanFiles`."""

    def __init__(self, folder: Path, budget: int) -> None:
        from orders.observability.trace_files import SpanFiles

        self.files = SpanFiles(folder, budget)

    def export(self, spans: Sequence[Any]) -> Any:
        """Write one line for the batch (raises ``OSError`` when it cannot)."""
        import orjson
        from opentelemetry.sdk.trace.export import SpanExportResult

        from orders.observability.trace_files import otlp_json

        self.files.append(orjson.dumps(otlp_json(spans)))
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        """Nothing held open between batches."""

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Every line is written when exported."""
        return True


_made: dict[tuple[Any, ...], Any] = {}
_made_lock = threading.Lock()


def tracer_provider(data_dir: Path, environ: Mapping[str, str] | None = None) -> Any | None:
    """This process's tracer provider, or None when tracing is off (or cannot start).

    Built once per process and configuration (later calls return the same one); its
    batch processors flush at exit. Each misconfiguration is logged once as a warning.

    Args:
        data_dir: the data dir (the local exporter writes into its ``traces`` folder).
        environ: the environment (default ``os.environ``).

    Returns:
        An ``opentelemetry.sdk.trace.TracerProvider``, or None.
    """
    env = os.environ if environ is None else environ
    config = tracing_config(env)
    key = (str(data_dir), config)
    with _made_lock:
        if key in _made:
            return _made[key]
        for warning in config.warnings:
            log.warning("tracing: %s", warning)
        provider = None
        if config.on:
            try:
                provider = _build(config, data_dir, env)
            except Exception as exc:  # never a crash: say it once, trace nothing
                log.warning("tracing is off: it could not start (%s: %s)", type(exc).__name__, exc)
        _made[key] = provider
        return provider


def _build(config: TracingConfig, data_dir: Path, environ: Mapping[str, str]) -> Any:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from orders.observability.trace_files import traces_dir

    attributes: dict[str, Any] = {"process.pid": os.getpid()}
    named = "service.name=" in environ.get("OTEL_RESOURCE_ATTRIBUTES", "")
    if not environ.get("OTEL_SERVICE_NAME") and not named:
        attributes["service.name"] = "orderflow"
    provider = TracerProvider(resource=Resource.create(attributes))
    batch: dict[str, Any] = dict(config.batch)
    if config.local:
        local = LocalSpanExporter(traces_dir(data_dir), config.budget)
        muted = MutedOnFailure(local, "local")
        provider.add_span_processor(BatchSpanProcessor(cast("SpanExporter", muted), **batch))
    if config.otlp:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        # the exporter's own per-batch complaints: MutedOnFailure says it once instead
        logging.getLogger("opentelemetry.exporter").setLevel(logging.CRITICAL)
        exporter = MutedOnFailure(OTLPSpanExporter(), "OTLP")
        provider.add_span_processor(BatchSpanProcessor(cast("SpanExporter", exporter), **batch))
        # runs before the provider's own exit hook (registered first): its last export
        # gets EXIT_SECONDS, not the exporter's retries against a collector that is down
        atexit.register(_bounded_exit, exporter, EXIT_SECONDS)
    return provider


def _bounded_exit(exporter: MutedOnFailure, seconds: float) -> None:
    """At exit: abandon ``exporter`` ``seconds`` from now unless the process is gone."""
    timer = threading.Timer(seconds, exporter.abandon)
    timer.daemon = True
    timer.start()


__all__ = ["LOCAL", "MutedOnFailure", "TracingConfig", "tracer_provider", "tracing_config"]
