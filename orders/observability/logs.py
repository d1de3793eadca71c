"""Structured log lines: JSON when stderr is not a terminal, readable when it is.

Every line logged while a job runs carries ``job_id``, ``queue``, ``task``,
``attempt`` and, for an order step, ``order_id``: :func:`job_log_context` is a
worker middleware that remembers the job for the lane thread running it, and
:class:`JobContextFilter` copies those fields onto each record. The worker's
own line about a job's outcome (logged just after the handler returned, with
``extra={"job_id": ...}``) gets the task and order id of the same job too.
A line logged while a span is current (a traced attempt, a placement) carries the
span's ``trace_id`` and ``span_id`` in JSON (a readable line leaves them out).
Credentials inside URLs are masked in every line (see ``urls``). Job text is
untrusted: no control or bidi character reaches the stream raw (a readable line
shows them as ``\\x1b`` escapes; a JSON line as ``\\u001b``, so the data parses
back unchanged).
"""

from __future__ import annotations

import contextvars
import datetime as dt
import json
import logging
import os
import signal
import sys
import unicodedata
from typing import IO, Any

from opentelemetry import trace

from orders.observability.urls import mask_urls_in
from orders.observability.visible import BIDI, visible
from reliable_queue.middleware import BatchMiddleware, CallNext, Items, Results

CONTEXT_FIELDS = ("job_id", "queue", "task", "attempt", "order_id", "trace_id", "span_id")
"""Record attributes that describe the job being worked on, in output order."""
TRACE_FIELDS = ("trace_id", "span_id")
"""The current span's ids (hex), added while a span is current; JSON lines only."""

_current: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "orders_job_log_context", default=None
)
_last: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "orders_job_log_last", default=None
)

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's colored copy of the message
}


def _order_id(payload: Any) -> Any:
    if isinstance(payload, dict):
        return payload.get("order_id")
    return getattr(payload, "order_id", None)


class JobLogContext(BatchMiddleware):
    """Worker middleware: log lines written during a job carry its fields.

    Called as ``job_log_context(ctx, payload, call_next)`` around one job, the
    fields are the job's ``job_id``, ``queue``, ``task``, ``attempt`` and the
    payload's ``order_id`` when it has one. Around a batch of several jobs (one
    handler call), they are ``queue``, ``task`` and ``job_ids`` (every job id of
    the batch, in order). Exceptions pass through unchanged.
    """

    def around(self, items: Items, call_next: CallNext) -> Results:
        """Run ``call_next(items)`` with the log fields of these jobs set for this thread."""
        fields: dict[str, Any]
        if len(items) == 1:
            payload, ctx = items[0]
            fields = {
                "job_id": ctx.job_id,
                "queue": ctx.queue,
                "task": ctx.task,
                "attempt": ctx.attempt,
            }
            order_id = _order_id(payload)
            if order_id is not None:
                fields["order_id"] = order_id
        else:
            first = items[0][1]
            fields = {
                "queue": first.queue,
                "task": first.task,
                "job_ids": [ctx.job_id for _, ctx in items],
            }
        token = _current.set(fields)
        if len(items) == 1:
            _last.set(fields)
        try:
            return call_next(items)
        finally:
            _current.reset(token)


job_log_context = JobLogContext()
"""The worker middleware instance (see :class:`JobLogContext`)."""


class JobContextFilter(logging.Filter):
    """Adds the current job's fields to each record (never drops a record).

    Inside a job every field is added. After it, a record that names the same
    ``job_id`` (the worker's retry / dead-letter line) gets the missing fields.
    Fields already on the record win.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Attach the fields; always returns True."""
        span = trace.get_current_span().get_span_context()
        if span.is_valid and not hasattr(record, "trace_id"):
            record.trace_id = format(span.trace_id, "032x")
            record.span_id = format(span.span_id, "016x")
        fields = _current.get()
        if fields is None:
            last = _last.get()
            if last is not None and getattr(record, "job_id", None) == last["job_id"]:
                fields = last
        if fields:
            for key, value in fields.items():
                if not hasattr(record, key):
                    setattr(record, key, value)
        return True


def _extras(record: logging.LogRecord) -> dict[str, Any]:
    out = {k: getattr(record, k) for k in CONTEXT_FIELDS if hasattr(record, k)}
    for key, value in vars(record).items():
        if key not in _STANDARD and key not in out and not key.startswith("_"):
            out[key] = value
    return out


def _json_escaped(line: str) -> str:
    # json.dumps(ensure_ascii=False) escapes only U+0000..U+001F: escape DEL, the
    # C1 controls and bidi overrides too (they occur only inside JSON strings).
    return "".join(
        f"\\u{ord(ch):04x}" if ch in BIDI or unicodedata.category(ch) == "Cc" else ch for ch in line
    )


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``msg``,
    the job fields when present, any other ``extra`` fields, and ``exc`` (traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as one JSON line (credentials in URLs masked)."""
        line: dict[str, Any] = {
            "ts": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "msg": mask_urls_in(record.getMessage()),
        }
        line.update(
            (k, mask_urls_in(v) if isinstance(v, str) else v) for k, v in _extras(record).items()
        )
        if record.exc_info:
            line["exc"] = mask_urls_in(self.formatException(record.exc_info))
        elif record.stack_info:
            line["stack"] = mask_urls_in(record.stack_info)
        return _json_escaped(json.dumps(line, default=str, ensure_ascii=False))


class ReadableFormatter(logging.Formatter):
    """``HH:MM:SS.mmm LEVEL logger: message  job_id=.. task=.. attempt=.. order_id=..``."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` for a person at a terminal (credentials in URLs masked)."""
        when = dt.datetime.fromtimestamp(record.created).strftime("%H:%M:%S.%f")[:-3]
        text = f"{when} {record.levelname:<7} {record.name}: {visible(record.getMessage())}"
        extras = {k: v for k, v in _extras(record).items() if k not in TRACE_FIELDS}
        if extras:
            text += "  " + " ".join(f"{k}={visible(str(v))}" for k, v in extras.items())
        if record.exc_info:
            text += "\n" + visible(self.formatException(record.exc_info), multiline=True)
        return mask_urls_in(text)


def configure_logging(
    level: str = "INFO", *, stream: IO[str] | None = None, json_lines: bool | None = None
) -> logging.Handler:
    """Send every log record to ``stream`` as JSON lines or readable lines.

    Replaces the root logger's handlers (so calling it twice does not double
    lines).

    Args:
        level: DEBUG, INFO, WARNING or ERROR (unknown names mean INFO).
        stream: where lines go (default ``sys.stderr``).
        json_lines: force JSON (True) or readable (False); None picks JSON
            unless ``stream`` is a terminal.

    Returns:
        The installed handler.
    """
    stream = stream or sys.stderr
    if json_lines is None:
        isatty = getattr(stream, "isatty", None)
        json_lines = not (isatty is not None and isatty())
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter() if json_lines else ReadableFormatter())
    handler.addFilter(JobContextFilter())
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    return handler


def signal_self_last(signum: int = signal.SIGKILL) -> None:
    """Send ``signum`` to this process with every line logged so far written out, and no
    other thread's line after the caller's.

    Flushes the root logger's handlers and holds their locks while the signal is sent: a
    line another thread is writing is finished first, and a thread that logs later
    waits on the lock (for SIGKILL, forever). The caller logs why first (an injected
    crash's last words). For a signal that does not end the process (SIGSTOP) the locks
    are released when it goes on.

    Args:
        signum: the signal (default SIGKILL).
    """
    handlers = list(logging.getLogger().handlers)
    for handler in handlers:
        handler.acquire()
    try:
        for handler in handlers:
            handler.flush()
        os.kill(os.getpid(), signum)
    finally:
        for handler in reversed(handlers):
            handler.release()
