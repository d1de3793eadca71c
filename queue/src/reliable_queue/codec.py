"""JSON job records (never pickle).

A record is the immutable part of a job, stored once at enqueue:
``{"t": task, "p": payload, "e": enqueued_at_ms, "m": max_attempts, "k": idempotency_key}``,
plus ``"c": traceparent`` and ``"s": tracestate`` when the job has a creation context
(docs/adr/0036-trace-context-travels-in-the-job-record.md); a record without them, or
with text there that is no valid context, decodes with no context. Short field names
keep Redis memory per waiting job low.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import orjson

from .errors import InvalidTextError
from .trace_context import TraceContext


class RecordDecodeError(ValueError):
    """A stored record is not valid UTF-8 JSON of the expected shape."""


@dataclass(frozen=True, slots=True)
class JobRecord:
    """Decoded job record.

    Attributes:
        task: task name.
        payload: the JSON payload (a dict for registered tasks).
        enqueued_at_ms: producer wall-clock time of the enqueue, epoch milliseconds.
        max_attempts: total runs allowed (0 and 1 both mean "no retry").
        idempotency_key: the key given at enqueue, or None.
        trace_context: the job's creation context (its producer's span), or None.
    """

    task: str
    payload: Any
    enqueued_at_ms: int
    max_attempts: int
    idempotency_key: str | None
    trace_context: TraceContext | None = None


def encode_record(
    task: str,
    payload: Any,
    enqueued_at_ms: int,
    max_attempts: int,
    idempotency_key: str | None,
    trace_context: TraceContext | None = None,
) -> bytes:
    """Encode a record to compact JSON bytes.

    Args:
        trace_context: the job's creation context; None writes no ``c`` / ``s`` field.

    Raises:
        TypeError: if the payload holds something JSON cannot represent.
    """
    record = {"t": task, "p": payload, "e": enqueued_at_ms, "m": max_attempts, "k": idempotency_key}
    if trace_context is not None:
        record["c"] = trace_context.traceparent
        if trace_context.tracestate:
            record["s"] = trace_context.tracestate
    return orjson.dumps(record)


def check_text(argument: str, value: str) -> str:
    """``value`` unchanged when UTF-8 can encode it (every text Redis is sent must be).

    Args:
        argument: what the text is, as the error names it (``idempotency key``).
        value: the text.

    Returns:
        ``value``.

    Raises:
        InvalidTextError: ``value`` holds a lone surrogate (``"\\ud800"``).
    """
    if value.isascii():  # constant time, and the usual case
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidTextError(argument, value, exc.start) from None
    return value


def unencodable_path(value: Any, path: str = "payload") -> tuple[str, str, int] | None:
    """Where ``value`` holds text UTF-8 cannot encode (a lone surrogate), or None.

    Bounded like :func:`non_finite_path` (orjson limits a payload's depth to 254 levels).

    Returns:
        ``(path, text, position)`` of the first such string (a dict key's path ends in
        ``<key>``), or None when every string encodes.
    """
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            return path, value, exc.start
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(k, str) and (found := unencodable_path(k, f"{path}<key>")):
                return found
            if found := unencodable_path(v, f"{path}[{k!r}]"):
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            if found := unencodable_path(v, f"{path}[{i}]"):
                return found
    return None


def non_finite_path(value: Any, path: str = "payload") -> str | None:
    """Where ``value`` holds a NaN or infinite float (JSON has no such numbers), or None.

    orjson writes them as ``null`` without a word, so an encoder that meets one would
    silently change the payload. Recursion is bounded by the payload's depth, which
    orjson itself limits to 254 levels.

    Returns:
        A path such as ``payload['x'][2]``, or None when every float is finite.
    """
    if isinstance(value, float):
        return None if math.isfinite(value) else path
    if isinstance(value, dict):
        for k, v in value.items():
            found = non_finite_path(v, f"{path}[{k!r}]")
            if found:
                return found
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            found = non_finite_path(v, f"{path}[{i}]")
            if found:
                return found
    return None


def decode_record(raw: bytes | str) -> JobRecord:
    """Decode a stored record (its trace context too: :func:`trace_context_of`).

    Raises:
        RecordDecodeError: invalid UTF-8, invalid JSON, or fields of the wrong type.
    """
    return JobRecord(*decode_fields(raw), trace_context_of(raw))


def trace_context_of(raw: bytes | str) -> TraceContext | None:
    """The creation context a stored record carries (``c``, ``s``), or None: none, a
    record that does not parse, or text that is no valid W3C context. Never raises.

    Read apart from :func:`decode_fields`, so that a worker that does not trace
    reads no field more per job.
    """
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(data, dict) or "c" not in data:
        return None
    return TraceContext.parse(data["c"], data.get("s"))


def decode_fields(raw: bytes | str) -> tuple[str, Any, int, int, str | None]:
    """Decode a stored record into its fields, without building a :class:`JobRecord`
    (the worker's per-job path; the trace context is not read: :func:`trace_context_of`).

    Returns:
        ``(task, payload, enqueued_at_ms, max_attempts, idempotency_key)``, as the
        attributes of :class:`JobRecord`.

    Raises:
        RecordDecodeError: invalid UTF-8, invalid JSON, or fields of the wrong type.
    """
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:  # also raised for invalid UTF-8
        raise RecordDecodeError(f"record is not valid UTF-8 JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise RecordDecodeError(f"record is a JSON {type(data).__name__}, not an object")
    task, enq, max_attempts = data.get("t"), data.get("e", 0), data.get("m", 1)
    if not isinstance(task, str) or not task:
        raise RecordDecodeError("record has no task name ('t')")
    if not isinstance(enq, int) or not isinstance(max_attempts, int):
        raise RecordDecodeError("record fields 'e' and 'm' must be integers")
    key = data.get("k")
    return task, data.get("p"), enq, max_attempts, key if isinstance(key, str) else None


def dumps(value: Any) -> bytes:
    """Compact JSON bytes of ``value`` (for failure info blobs).

    Failure info carries text from handlers (an exception's message, a traceback), which
    may hold a lone surrogate that UTF-8 cannot encode: such a character is stored as its
    ``\\udXXX`` escape instead of failing the nack or dead-lettering that records it.

    Raises:
        TypeError: ``value`` holds something JSON cannot represent other than such text.
    """
    try:
        return orjson.dumps(value)
    except TypeError:
        if unencodable_path(value) is None:
            raise
        return orjson.dumps(_escaped(value))


def _escaped(value: Any) -> Any:
    """``value`` with every unencodable character of its strings shown as an escape."""
    if isinstance(value, str):
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, dict):
        return {_escaped(k): _escaped(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_escaped(v) for v in value]
    return value


def loads(raw: bytes | str) -> Any:
    """Parse JSON bytes or str. Raises ``orjson.JSONDecodeError`` (a ValueError)."""
    return orjson.loads(raw)
