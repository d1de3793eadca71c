"""A job's creation context: the W3C ``traceparent`` / ``tracestate`` its record carries.

:class:`TraceContext` is a plain value (no OpenTelemetry import): the producer's span
context written into the job record at enqueue (``codec``), read back into every
delivery's ``JobContext.trace_context``. It travels with the record, so every route
that keeps the record (retry, promotion, reap, release, redrive, audit repair) keeps
it. A constructed value is valid W3C (version-00 form); :meth:`TraceContext.parse` is
the tolerant door for stored text: anything invalid reads as no context. See
docs/adr/0036-trace-context-travels-in-the-job-record.md.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import InvalidTraceContextError

#: ``version-traceid-spanid-flags``, lower-case hex (W3C Trace Context, version 00 form)
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
#: length of a traceparent, characters
TRACEPARENT_CHARS = 55
#: longest tracestate kept, characters (W3C: a vendor may drop a longer one whole)
MAX_TRACESTATE_CHARS = 512
_ZERO_TRACE = "0" * 32
_ZERO_SPAN = "0" * 16


def _problem(traceparent: object, tracestate: object) -> str | None:
    """Why the pair is not a valid context, or None when it is."""
    if not isinstance(traceparent, str):
        return f"traceparent must be text, not {type(traceparent).__name__}"
    match = _TRACEPARENT.fullmatch(traceparent)
    if match is None:
        return "traceparent is not 'vv-<32 hex>-<16 hex>-ff' in lower-case hex"
    version, trace_id, span_id, _ = match.groups()
    if version == "ff" or trace_id == _ZERO_TRACE or span_id == _ZERO_SPAN:
        return "traceparent has version ff or an all-zero trace or span id"
    if not isinstance(tracestate, str):
        return f"tracestate must be text, not {type(tracestate).__name__}"
    if len(tracestate) > MAX_TRACESTATE_CHARS:
        return f"tracestate is longer than {MAX_TRACESTATE_CHARS} characters"
    if tracestate and not (tracestate.isascii() and tracestate.isprintable()):
        return "tracestate holds characters outside printable ASCII"
    return None


@dataclass(frozen=True, slots=True)
class TraceContext:
    """A W3C trace context (https://www.w3.org/TR/trace-context/).

    Attributes:
        traceparent: ``"00-<32 hex trace id>-<16 hex span id>-<2 hex flags>"``
            (55 characters).
        tracestate: the vendor list, ``""`` when none (at most
            :data:`MAX_TRACESTATE_CHARS` printable ASCII characters).

    Raises:
        InvalidTraceContextError: (a ``ValueError``) either field is not as above.
    """

    traceparent: str
    tracestate: str = ""

    def __post_init__(self) -> None:
        problem = _problem(self.traceparent, self.tracestate)
        if problem is not None:
            raise InvalidTraceContextError(problem)

    @classmethod
    def parse(cls, traceparent: object, tracestate: object = None) -> TraceContext | None:
        """The context of stored text, or None when it is absent or invalid.

        Args:
            traceparent: the stored traceparent (None: no context).
            tracestate: the stored tracestate; None or invalid keeps the traceparent
                alone (W3C: a tracestate may be dropped, never the traceparent).

        Returns:
            A :class:`TraceContext`, or None; never raises.
        """
        if traceparent is None:
            return None
        state = tracestate if isinstance(tracestate, str) else ""
        if _problem(traceparent, state) is None:
            return cls(traceparent, state)  # type: ignore[arg-type]
        if state and _problem(traceparent, "") is None:
            return cls(traceparent, "")  # type: ignore[arg-type]
        return None

    @property
    def trace_id(self) -> str:
        """The trace id, 32 lower-case hex digits."""
        return self.traceparent[3:35]

    @property
    def span_id(self) -> str:
        """The parent span id, 16 lower-case hex digits."""
        return self.traceparent[36:52]

    def carrier(self) -> dict[str, str]:
        """The W3C headers, as an OpenTelemetry propagator reads them."""
        if self.tracestate:
            return {"traceparent": self.traceparent, "tracestate": self.tracestate}
        return {"traceparent": self.traceparent}

    @classmethod
    def from_carrier(cls, carrier: dict[str, str]) -> TraceContext | None:
        """The context a propagator wrote into ``carrier``, or None (see :meth:`parse`)."""
        return cls.parse(carrier.get("traceparent"), carrier.get("tracestate"))


__all__ = ["MAX_TRACESTATE_CHARS", "TRACEPARENT_CHARS", "TraceContext"]
