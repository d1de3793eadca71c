"""A second CPU-bound process on the machine while a measured window runs.

``peers --cpu-hog`` runs every latency run beside one: a Python busy loop in a
subprocess of its own process group, started just before the run and killed after
it, also when the run fails. It is bounded by itself as well: it exits after
``bound_seconds`` even if this process dies without stopping it, so none is ever
left spinning behind a run.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .measure import process_cpu_seconds

#: The hog: says it is running (one byte on stdout), then spins until its bound.
LOOP = """
import sys, time
end = time.monotonic() + float(sys.argv[1])
sys.stdout.write("1")
sys.stdout.flush()
while time.monotonic() < end:
    for _ in range(100_000):
        pass
"""

#: Seconds the hog may take to start spinning before it counts as failed.
START_TIMEOUT = 30.0


@dataclass(frozen=True)
class Hog:
    """A running hog.

    Attributes:
        pid: its process id (it leads its own process group).
    """

    pid: int

    def cpu_seconds(self) -> float | None:
        """CPU seconds (user + system) it has used so far; None once it is gone."""
        return process_cpu_seconds(self.pid)


@contextmanager
def cpu_hog(bound_seconds: float) -> Iterator[Hog]:
    """Run one CPU-bound busy loop in a subprocess for the length of the ``with`` block.

    The loop is spinning when the block starts; when the block ends, however it ends,
    the process is killed (SIGKILL to its process group) and reaped.

    Args:
        bound_seconds: the longest the loop runs, seconds (> 0), should nothing stop it.

    Yields:
        The :class:`Hog`.

    Raises:
        ValueError: ``bound_seconds`` not above 0.
        RuntimeError: the loop did not start within :data:`START_TIMEOUT` seconds.
    """
    if not bound_seconds > 0:
        raise ValueError(f"bound_seconds must be above 0, not {bound_seconds}")
    proc = subprocess.Popen(
        [sys.executable, "-c", LOOP, repr(float(bound_seconds))],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT)
        if not ready or proc.stdout.read(1) != b"1":
            raise RuntimeError(f"the CPU hog did not start within {START_TIMEOUT:.0f} s")
        yield Hog(proc.pid)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it reached its bound
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()


def share_of_a_core(cpu_before: float | None, cpu_after: float | None, seconds: float) -> float:
    """CPU the hog used over a window, in cores (1.0: it had one core all the time).

    Returns:
        The share, rounded to 2 decimals; 0.0 when either reading is missing or the
        window is empty.
    """
    if cpu_before is None or cpu_after is None or seconds <= 0:
        return 0.0
    return round((cpu_after - cpu_before) / seconds, 2)
