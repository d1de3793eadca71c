"""Who holds the SQLite writers' turn, until when, and taking it from a holder past that.

A holder writes one record at the start of the turn file right after it takes the
turn: its pid, its process's start time (``/proc/<pid>/stat``, clock ticks since
boot: a pid reused by a later process does not match) and a deadline on the
system's monotonic clock, or 0 for a holder that declares no lease (a command). A
waiter that looks twice, at least :data:`LOOK_EVERY_SECONDS` apart, and finds the
same record past its deadline, held by that very process (``/proc/locks``), kills
it: a frozen worker loses its turn (ADR 0023). Without ``/proc`` nothing is killed.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger("orders.app.sqlite_writers")

#: size of the record at the start of the turn file, bytes
RECORD_BYTES = 64
#: a waiter reads the record at most this often, seconds; a kill needs two looks
LOOK_EVERY_SECONDS = 0.05


def turn_margin(lease_seconds: float) -> float:
    """Seconds a holder may keep its turn past its lease: a quarter lease, at least 1 s.

    A live worker's write transaction lasts milliseconds; the margin covers one
    that is slow but alive (an fsync stall, a page swapped back in) before its
    process is taken for frozen.
    """
    return max(lease_seconds / 4.0, 1.0)


@dataclass(frozen=True)
class Holder:
    """One turn holder's record.

    Attributes:
        pid: its process id.
        start: its process's start time, clock ticks since boot (0: unknown).
        deadline: monotonic seconds its turn ends by; 0 for a holder without a lease.
    """

    pid: int
    start: int
    deadline: float

    def encode(self) -> bytes:
        """The record as written to the file (:data:`RECORD_BYTES`, newline-ended)."""
        text = f"{self.pid} {self.start} {self.deadline:.3f}"
        return text.encode().ljust(RECORD_BYTES - 1) + b"\n"

    @classmethod
    def decode(cls, raw: bytes) -> Holder | None:
        """The record in ``raw``, or None when it is empty or not a record."""
        parts = raw.split()
        if len(parts) != 3:
            return None
        try:
            return cls(int(parts[0]), int(parts[1]), float(parts[2]))
        except ValueError:
            return None


def process_start(pid: int, proc: Path = Path("/proc")) -> int | None:
    """Start time of process ``pid`` in clock ticks since boot, or None (gone, no /proc)."""
    try:
        stat = (proc / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    fields = stat.rpartition(b")")[2].split()  # the name before it may hold spaces
    try:
        return int(fields[19])  # field 22 of stat(5); the split starts at field 3
    except (IndexError, ValueError):
        return None


def flock_holders(fd: int, proc: Path = Path("/proc")) -> set[int]:
    """Pids holding an exclusive ``flock`` on the file open as ``fd`` (``/proc/locks``)."""
    st = os.fstat(fd)
    inode = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    try:
        lines = (proc / "locks").read_text().splitlines()
    except OSError:
        return set()
    pids = set()
    for line in lines:
        fields = line.split()
        if "->" in fields or len(fields) < 6:
            continue  # a blocked request, or not a lock line
        if fields[1:4] == ["FLOCK", "ADVISORY", "WRITE"] and fields[5] == inode:
            try:
                pids.add(int(fields[4]))
            except ValueError:
                continue
    return pids


class HolderWatch:
    """One waiter's view of the turn's holder across its looks (one per wait).

    Args:
        fd: the waiter's descriptor of the turn file.
        clock: monotonic seconds (the holders' deadlines are on the same clock).
        kill: sends a signal to a pid (``os.kill``; injectable for tests).
        proc: the ``/proc`` file system.
    """

    def __init__(
        self,
        fd: int,
        clock: Callable[[], float],
        kill: Callable[[int, int], None] = os.kill,
        proc: Path = Path("/proc"),
    ) -> None:
        self.fd = fd
        self.clock = clock
        self.kill = kill
        self.proc = proc
        self.overdue: Holder | None = None  # the record last found past its deadline

    def look(self) -> bool:
        """Read the record; kill its holder when it is found past its deadline again.

        Returns:
            True when a holder was killed (its turn is free once it is gone).
        """
        holder = Holder.decode(os.pread(self.fd, RECORD_BYTES, 0))
        if holder is None or holder.deadline == 0 or self.clock() < holder.deadline:
            self.overdue = None
            return False
        if holder != self.overdue:
            self.overdue = holder  # past its deadline: confirmed at the next look
            return False
        if holder.pid == os.getpid() or holder.start == 0:
            return False
        if process_start(holder.pid, self.proc) != holder.start:
            return False  # gone, or its pid belongs to another process now
        if holder.pid not in flock_holders(self.fd, self.proc):
            return False  # its record outlived its turn
        log.error(
            "SQLite writers' turn held by process %d past its lease (%.1f s over): killing it "
            "(a frozen worker loses its turn; its jobs' leases expire and are reaped)",
            holder.pid,
            self.clock() - holder.deadline,
        )
        try:
            self.kill(holder.pid, signal.SIGKILL)
        except OSError:
            return False
        self.overdue = None
        return True
