"""Bounded label values: a metric label never carries job or Redis text as is.

A label value taken from Redis or a job record (a task name, a dead-letter
reason) is untrusted: each new value would be a new time series (unbounded
cardinality on a foreign producer's whim) and could carry control characters
to whoever reads ``/metrics`` in a terminal. Such values pass :func:`bounded`,
which keeps a known value and folds everything else into :data:`UNKNOWN`. The
real value stays visible, escaped, where a person looks at one job (the DLQ
pages and ``orders dlq``).
"""

from __future__ import annotations

from collections.abc import Collection

UNKNOWN = "unknown"
"""The one label value every unexpected value is folded into."""


def bounded(value: object, known: Collection[str]) -> str:
    """``value`` if it is one of ``known``, else :data:`UNKNOWN`.

    Args:
        value: a label value read from Redis or a job (anything).
        known: the values the code itself defines (task names, queue names,
            dead-letter reasons).

    Returns:
        A string from ``known`` or ``"unknown"``.
    """
    return value if isinstance(value, str) and value in known else UNKNOWN
