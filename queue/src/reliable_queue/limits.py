"""Limits of the library: what one script call carries, and the bound of every number
argument of its entry points.

A Lua script that fails half-way keeps the writes it made before the error, so every
script validates its input before its first write and never works on more than a
bounded amount per call. The Lua side (``lua/_common.lua``) carries the same numbers;
a unit test checks that they agree. Callers never see these limits as errors: a
request larger than one call can serve is split into several calls, each atomic.

Number arguments (delays, run-at times, lease lengths, attempts, rates, batch sizes)
are checked here before anything is sent: a value past its bound, NaN, an infinity or
a non-number is refused with :class:`~reliable_queue.errors.QueueLimitError`. Every
bound keeps the milliseconds the scripts compute well inside the integers a double
holds exactly (2**53), so a stored time is the time asked for, never an overflow
(docs/reliability.md, "Hostile input", has the table).
"""

from __future__ import annotations

import math
from numbers import Real
from typing import Any

from .errors import QueueLimitError

#: Most job ids one script call carries: a fetch's count, an ack / extend / release
#: batch, an enqueue batch, a purge / redrive / replay batch.
SCRIPT_BATCH = 500

#: Most jobs one :meth:`Queue.fetch` (or one worker lane's fetch) may ask for; it is
#: served by ``ceil(count / SCRIPT_BATCH)`` script calls in one round trip.
MAX_FETCH = 10_000

#: Most entries one call trims from the DLQ (age / size bounds) or from ``done``
#: (retention); upkeep repeats the call until less than this is left.
TRIM_STEP = 500

#: Job ids longer than this (bytes) cannot be leased; a stored one is dead-lettered
#: with reason ``invalid_record``.
MAX_ID_BYTES = 200

#: Largest fencing floor :meth:`Queue.raise_fencing_floor` accepts: 2**52, half the
#: range a Lua number holds exactly, so the sequence has room above any floor.
MAX_FENCING_FLOOR = 2**52


#: Longest a job may be put off, seconds (a delay, a retry's backoff, a ``run_at`` past
#: now): ten years.
MAX_DELAY_SECONDS = 10 * 366 * 86400.0

#: Latest ``run_at``, epoch seconds: 9999-12-31 23:59:59 UTC (the last second a date
#: can show). ``run_at`` must also be at most :data:`MAX_DELAY_SECONDS` from now.
MAX_RUN_AT = 253_402_300_799.0

#: Longest lease one fetch or heartbeat may ask for, seconds (one day).
MAX_LEASE_SECONDS = 86_400.0

#: Most runs a job may be allowed (``max_attempts``, a policy's, the queue default).
MAX_ATTEMPTS = 10_000

#: Largest encoded job record ``QueueSettings.max_payload_bytes`` may allow (Redis's
#: own default bound of one value, 512 MB).
MAX_PAYLOAD_BYTES = 512 * 1024 * 1024

#: Largest DLQ bound ``QueueSettings.dlq_max_size`` may set.
MAX_DLQ_SIZE = 100_000_000

#: Fastest a redrive may be paced, jobs per second.
MAX_REDRIVE_RATE = 100_000.0

#: Largest state one worker process publishes, bytes of JSON (``presence.lua`` refuses
#: more; the worker cuts its lane list first, :data:`MAX_LANES_PUBLISHED`).
MAX_WORKER_STATE_BYTES = 65_536

#: Most lanes one worker's published state lists (its counts of busy, idle and
#: abandoned lanes cover every lane).
MAX_LANES_PUBLISHED = 64

#: Most worker processes the presence keys remember; past it the least recently heard
#: of are forgotten (ADR 0043).
WORKERS_KEPT = 1_000

#: Entries one presence publish forgets at most (``presence.lua``'s ``PRESENCE_TRIM``).
PRESENCE_TRIM = 100

#: Most workers one reading of the presence keys returns (``presence.workers``).
MAX_WORKERS_SHOWN = 1_000
#: Most throttles one attempt may be allowed (``QueueSettings.max_throttles``; the
#: throttle script carries the same bound).
MAX_THROTTLES = 10_000

#: Job priorities: ``MIN_PRIORITY`` (served first) .. ``MAX_PRIORITY``; a job without one
#: has ``DEFAULT_PRIORITY`` (ADR 0033; the scripts' ``DEFAULT_BAND``).
MIN_PRIORITY, DEFAULT_PRIORITY, MAX_PRIORITY = 0, 5, 9

#: Longest fairness key, in bytes of UTF-8 (ADR 0033).
MAX_FAIRNESS_KEY_BYTES = 128

#: Largest per-key cap (``Queue.set_key_cap``; the scripts read at most 9 digits).
MAX_KEY_CAP = 100_000


def number(name: str, value: Any, *, low: float, high: float, low_open: bool = False) -> float:
    """``value`` as a float checked against ``[low, high]`` (``(low, high]`` with ``low_open``).

    Args:
        name: the argument, as the message names it (``delay``, ``lease_seconds``).
        value: what the caller gave: an int or float (a bool is refused).

    Returns:
        The value as a float.

    Raises:
        QueueLimitError: not a real number, NaN, infinite, or outside the bounds.
    """
    kind = type(value)  # the usual case first: a plain number in range (NaN fails both tests)
    if (
        (kind is float or kind is int)
        and value <= high
        and (low < value if low_open else low <= value)
    ):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, Real):
        raise QueueLimitError(f"{name} must be a number of seconds, not {value!r}")
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        raise QueueLimitError(f"{name} {value} is past its bound {_shown(high)}") from None
    if not math.isfinite(number):
        raise QueueLimitError(f"{name} must be a finite number, not {value!r}")
    too_low = number <= low if low_open else number < low
    if too_low or number > high:
        side = f"above {_shown(low)}" if low_open else f"at least {_shown(low)}"
        raise QueueLimitError(f"{name} must be {side} and at most {_shown(high)}, not {value!r}")
    return number


def _shown(bound: float) -> str:
    """A bound as a person reads it: ``316224000``, ``0.5``."""
    return str(int(bound)) if bound == int(bound) else f"{bound:g}"


def integer(name: str, value: Any, *, low: int, high: int) -> int:
    """``value`` as an int checked against ``[low, high]``.

    Raises:
        QueueLimitError: not an int (a bool or a float is refused), or outside the bounds.
    """
    if type(value) is int and low <= value <= high:
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise QueueLimitError(f"{name} must be a whole number, not {value!r}")
    if not low <= value <= high:
        raise QueueLimitError(f"{name} must be {low}..{high}, not {value}")
    return int(value)


def chunks(items: list, size: int = SCRIPT_BATCH) -> list[list]:
    """``items`` cut into consecutive lists of at most ``size`` (at least one list)."""
    return [items[i : i + size] for i in range(0, len(items), size)] or [[]]
