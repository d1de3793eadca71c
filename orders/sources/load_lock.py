"""One TPC-H generation and load at a time per data dir: an exclusive ``flock``.

Two first-time runs of ``orders load-tpch`` (or ``orders demo``) on one data dir
would otherwise both run ``tpchgen-cli`` into the same folder (one fails renaming
the other's half-written file) and both insert the same customers. The lock
serialises them: the second waits, then finds the stream loaded and does nothing.
The lock lives in the data dir, so it only orders processes of one machine; the
database guards the rest (see ``orders.sources.tpch.load_tpch``).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from orders.domain.errors import TpchLoadBusy

LOCK_TIMEOUT_SECONDS = 1800.0
"""How long a load waits for another load of the same data dir (seconds): longer
than the slowest load the CLI allows (scale 1.0 into SQLite takes minutes), short
enough that a run stuck behind a hung one ends with a message instead of forever."""

WAITING_MESSAGE = "waiting for another TPC-H load of this data dir to finish..."
"""What a command shows while it waits for the lock."""

_FIRST_PAUSE_SECONDS = 0.05
_MAX_PAUSE_SECONDS = 1.0


@contextmanager
def exclusive_lock(
    path: Path,
    timeout: float = LOCK_TIMEOUT_SECONDS,
    *,
    on_wait: Callable[[], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` for the ``with`` block.

    The lock goes with the process however it ends (kill -9 included): a crashed
    load never blocks the next one.

    Args:
        path: the lock file (created 0600 with its folder if missing; never removed).
        timeout: seconds to wait for a holder to let go.
        on_wait: called once, when the lock is found taken (to tell the user why
            nothing happens yet).
        clock: monotonic clock in seconds (tests pass their own).
        sleep: pause between attempts, in seconds (tests pass their own).

    Raises:
        TpchLoadBusy: the lock was still taken after ``timeout`` seconds.
        OSError: the file or its folder cannot be created.
    """
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        _acquire(fd, path, timeout, on_wait, clock, sleep)
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the flock


def _acquire(
    fd: int,
    path: Path,
    timeout: float,
    on_wait: Callable[[], None] | None,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    deadline = clock() + timeout
    pause = _FIRST_PAUSE_SECONDS
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        if on_wait is not None:
            on_wait()
            on_wait = None
        left = deadline - clock()
        if left <= 0:
            raise TpchLoadBusy(
                f"another TPC-H load of this data dir still holds {path} after {timeout:g} s; "
                "wait for it to finish (or stop it) and run the command again"
            )
        sleep(min(pause, left))
        pause = min(pause * 2, _MAX_PAUSE_SECONDS)
