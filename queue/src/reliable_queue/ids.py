"""Job ids: time-ordered and unique without a round trip.

``<epoch ms as 11 hex digits><16 random hex digits>``: sorting ids sorts by
creation time; 64 random bits make a collision within one millisecond
negligible (birthday bound ~ n^2 / 2^65).
"""

from __future__ import annotations

import os
import time


def new_job_id(now: float | None = None) -> str:
    """A new 27-character job id.

    Args:
        now: epoch seconds to stamp (default: the current time).
    """
    ms = int((time.time() if now is None else now) * 1000)
    return f"{ms:011x}{os.urandom(8).hex()}"
