"""Hard limits of one script call, shared by the Python side and the Lua scripts.

A Lua script that fails half-way keeps the writes it made before the error, so every
script validates its input before its first write and never works on more than a
bounded amount per call. The Lua side (``lua/_common.lua``) carries the same numbers;
a unit test checks that they agree. Callers never see these limits as errors: a
request larger than one call can serve is split into several calls, each atomic.
"""

from __future__ import annotations

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


def chunks(items: list, size: int = SCRIPT_BATCH) -> list[list]:
    """``items`` cut into consecutive lists of at most ``size`` (at least one list)."""
    return [items[i : i + size] for i in range(0, len(items), size)] or [[]]
