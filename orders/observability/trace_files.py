"""The local trace exporter: OTLP JSON lines in the data dir, bounded, and their reader.

Each process appends to files of its own (``traces/spans-<pid>-<start ms>-<n>.jsonl``),
one line per exported batch, each line an OTLP/JSON ``TracesData`` object (the OTLP
file exporter format: ids in hex). A file past its size starts the next one, and the
oldest files of the folder (any process's) are deleted while the folder holds more
than its budget, so the folder never grows past the budget plus one file per
writing process. :func:`read_spans` reads back the spans of some traces, and those
that link to them. The files are untrusted input: a line that does not parse is
skipped. Reasoning: docs/adr/0037-local-traces-in-the-data-dir.md.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

#: the folder of the data dir the spans go to
FOLDER = "traces"
#: file name pattern of the span files
PATTERN = "spans-*.jsonl"
#: default budget of the folder, bytes
DEFAULT_BUDGET = 64 * 1024 * 1024
#: the budget is cut into this many files (a file is rotated past budget / this)
FILES_PER_BUDGET = 8
#: longest line the reader parses, bytes (a batch of 512 spans is about 300 kB)
MAX_LINE = 16 * 1024 * 1024
#: most spans one read returns (the oldest are dropped past it)
MAX_SPANS = 20_000


def traces_dir(data_dir: Path) -> Path:
    """The folder of the local span files under ``data_dir`` (not created)."""
    return data_dir / FOLDER


def _any(value: Any) -> dict[str, Any]:
    """An attribute value as an OTLP/JSON ``AnyValue`` (64-bit integers as strings)."""
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, Sequence):
        return {"arrayValue": {"values": [_any(v) for v in value]}}
    return {"stringValue": str(value)}


def _key_values(attributes: Any) -> list[dict[str, Any]]:
    return [{"key": k, "value": _any(v)} for k, v in (attributes or {}).items()]


def _span(span: Any) -> dict[str, Any]:
    """One SDK ``ReadableSpan`` as an OTLP/JSON ``Span`` (hex ids, integer enums)."""
    context = span.context
    out: dict[str, Any] = {
        "traceId": format(context.trace_id, "032x"),
        "spanId": format(context.span_id, "016x"),
        "name": span.name,
        "kind": span.kind.value + 1,  # the SDK counts from INTERNAL = 0, OTLP from 1
        "startTimeUnixNano": str(span.start_time or 0),
        "endTimeUnixNano": str(span.end_time or 0),
        "attributes": _key_values(span.attributes),
        "status": {"code": span.status.status_code.value},
    }
    if span.parent is not None:
        out["parentSpanId"] = format(span.parent.span_id, "016x")
    if span.status.description:
        out["status"]["message"] = span.status.description
    if span.links:
        out["links"] = [
            {
                "traceId": format(link.context.trace_id, "032x"),
                "spanId": format(link.context.span_id, "016x"),
                "attributes": _key_values(link.attributes),
            }
            for link in span.links
        ]
    if span.events:
        out["events"] = [
            {
                "timeUnixNano": str(e.timestamp),
                "name": e.name,
                "attributes": _key_values(e.attributes),
            }
            for e in span.events
        ]
    return out


def otlp_json(spans: Sequence[Any]) -> dict[str, Any]:
    """SDK ``ReadableSpan`` objects as one OTLP/JSON ``TracesData`` object, grouped by
    resource and instrumentation scope (the OTLP file exporter's line format).

    Written here rather than through the OTLP exporter's protobuf encoder and
    protobuf's JSON form: that path cost about 100 µs per span here, this one a fifth
    (docs/adr/0037).
    """
    grouped: dict[int, tuple[Any, dict[Any, list[dict[str, Any]]]]] = {}
    for span in spans:
        _, scopes = grouped.setdefault(id(span.resource), (span.resource, {}))
        scopes.setdefault(span.instrumentation_scope, []).append(_span(span))
    return {
        "resourceSpans": [
            {
                "resource": {"attributes": _key_values(resource.attributes)},
                "scopeSpans": [
                    {
                        "scope": {"name": getattr(scope, "name", "") or ""}
                        | ({"version": scope.version} if getattr(scope, "version", None) else {}),
                        "spans": encoded,
                    }
                    for scope, encoded in scopes.items()
                ],
            }
            for resource, scopes in grouped.values()
        ]
    }


class SpanFiles:
    """Appends encoded batches to this process's span files, within a folder budget.

    Args:
        folder: the folder (created 0700 on the first write).
        budget: most bytes the folder's span files may hold (>= 64 kB).
        clock: wall clock, epoch seconds (names the files).

    Raises:
        ValueError: a budget below 64 kB.
    """

    def __init__(self, folder: Path, budget: int = DEFAULT_BUDGET, clock: Any = time.time) -> None:
        if budget < 64 * 1024:
            raise ValueError("the trace folder's budget must be at least 64 kB")
        self.folder = folder
        self.budget = budget
        self.file_limit = budget // FILES_PER_BUDGET
        self._stem = f"spans-{os.getpid()}-{int(clock() * 1000)}"
        self._n = 0
        self._size = 0
        self._path: Path | None = None
        self._lock = threading.Lock()

    def append(self, line: bytes) -> None:
        """Write one line (a newline is added); rotate and prune when the file is full.

        Raises:
            OSError: the folder or file cannot be written.
        """
        with self._lock:
            if self._path is None or self._size >= self.file_limit:
                self._next_file()
            assert self._path is not None
            with open(self._path, "ab") as out:  # one write: one whole line
                out.write(line + b"\n")
            self._size += len(line) + 1

    def _next_file(self) -> None:
        self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._n += 1
        self._path = self.folder / f"{self._stem}-{self._n}.jsonl"
        self._size = 0
        prune(self.folder, self.budget - self.file_limit, keep=self._path)


def prune(folder: Path, budget: int, keep: Path | None = None) -> int:
    """Delete the oldest span files while the folder holds more than ``budget`` bytes.

    Args:
        keep: a file never deleted (the writer's next one).

    Returns:
        Files deleted (one another process deleted first is not counted).
    """
    files = []
    for path in folder.glob(PATTERN):
        try:
            stat = path.stat()
        except OSError:
            continue
        files.append((stat.st_mtime, path, stat.st_size))
    files.sort()
    total = sum(size for _, _, size in files)
    deleted = 0
    for _, path, size in files:
        if total <= budget:
            break
        if path == keep:
            continue
        try:
            path.unlink()
            deleted += 1
        except OSError:
            pass
        total -= size
    return deleted


@dataclass(frozen=True)
class SpanRecord:
    """One span read back from the files.

    Attributes:
        trace_id / span_id / parent_id: hex ids (``parent_id`` "" for a root).
        name: the span's name (untrusted text).
        kind: OTLP span kind (1 internal, 2 server, 3 client, 4 producer, 5 consumer).
        start_ns / end_ns: epoch nanoseconds.
        attributes: key -> value (strings, ints, floats, bools, lists).
        links: ``(trace id, span id)`` pairs it links to.
        status: OTLP status code (0 unset, 1 ok, 2 error) and its message.
        service: the writing process's ``service.name`` and ``process.pid``.
    """

    trace_id: str
    span_id: str
    parent_id: str
    name: str
    kind: int
    start_ns: int
    end_ns: int
    attributes: dict[str, Any] = field(default_factory=dict)
    links: tuple[tuple[str, str], ...] = ()
    status: tuple[int, str] = (0, "")
    service: str = ""

    @property
    def duration_ms(self) -> float:
        """How long the span lasted, milliseconds."""
        return max(self.end_ns - self.start_ns, 0) / 1e6


def _value(value: Any) -> Any:
    """The Python value of an OTLP ``AnyValue`` object."""
    if not isinstance(value, dict):
        return None
    if "stringValue" in value:
        return str(value["stringValue"])
    if "intValue" in value:
        try:
            return int(value["intValue"])
        except (TypeError, ValueError):
            return None
    if "doubleValue" in value:
        return value["doubleValue"]
    if "boolValue" in value:
        return bool(value["boolValue"])
    if "arrayValue" in value:
        return [_value(v) for v in (value["arrayValue"] or {}).get("values", [])]
    return None


def _attributes(items: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items if isinstance(items, list) else ():
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            out[item["key"]] = _value(item.get("value"))
    return out


def _record(span: dict[str, Any], service: str) -> SpanRecord:
    status = span.get("status") or {}
    links = tuple(
        (str(link.get("traceId", "")), str(link.get("spanId", "")))
        for link in span.get("links", ())
        if isinstance(link, dict)
    )
    return SpanRecord(
        trace_id=str(span.get("traceId", "")),
        span_id=str(span.get("spanId", "")),
        parent_id=str(span.get("parentSpanId", "") or ""),
        name=str(span.get("name", "")),
        kind=int(span.get("kind", 0) or 0),
        start_ns=int(span.get("startTimeUnixNano", 0) or 0),
        end_ns=int(span.get("endTimeUnixNano", 0) or 0),
        attributes=_attributes(span.get("attributes")),
        links=links,
        status=(int(status.get("code", 0) or 0), str(status.get("message", ""))),
        service=service,
    )


def _service(resource: dict[str, Any]) -> str:
    attributes = _attributes((resource.get("resource") or {}).get("attributes"))
    name = attributes.get("service.name") or "?"
    pid = attributes.get("process.pid")
    return f"{name} pid {pid}" if pid is not None else str(name)


def spans_of_line(line: bytes) -> list[SpanRecord]:
    """The spans of one OTLP/JSON line; [] for a line that does not parse."""
    try:
        data = orjson.loads(line)
        out: list[SpanRecord] = []
        for resource in data.get("resourceSpans", ()):
            service = _service(resource)
            for scope in resource.get("scopeSpans", ()):
                out.extend(_record(span, service) for span in scope.get("spans", ()))
        return out
    except (orjson.JSONDecodeError, AttributeError, TypeError, ValueError):
        return []


def read_spans(folder: Path, trace_ids: Collection[str]) -> list[SpanRecord]:
    """The spans of ``trace_ids`` found in the folder, and the spans linking into them.

    Args:
        folder: the span files' folder (missing: no span).
        trace_ids: hex trace ids.

    Returns:
        Up to :data:`MAX_SPANS` spans ordered by start time, each once.
    """
    wanted = {t.lower() for t in trace_ids}
    keys = [t.encode() for t in wanted]
    found: dict[tuple[str, str], SpanRecord] = {}
    for path in _files(folder):
        try:
            with open(path, "rb") as lines:
                for line in lines:
                    if len(line) > MAX_LINE or not any(k in line for k in keys):
                        continue
                    for span in spans_of_line(line):
                        if span.trace_id in wanted or any(t in wanted for t, _ in span.links):
                            found[(span.trace_id, span.span_id)] = span
        except OSError:
            continue
    spans = sorted(found.values(), key=lambda s: (s.start_ns, s.span_id))
    return spans[-MAX_SPANS:]


def _files(folder: Path) -> Sequence[Path]:
    try:
        return sorted(folder.glob(PATTERN))
    except OSError:
        return []


__all__ = ["SpanFiles", "SpanRecord", "otlp_json", "prune", "read_spans", "traces_dir"]
