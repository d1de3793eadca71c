"""Timing helpers: worker subprocesses, drain timing by polling Redis, percentiles."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

POLL_SECONDS = 0.005


def start_process(
    argv: Sequence[str], env: Mapping[str, str] | None = None, log: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start a worker process in its own process group (so its children stop with it).

    Args:
        argv: the command; a leading ``"python"`` is replaced by this interpreter.
        env: extra environment variables on top of ours.
        log: file for its stdout/stderr (default: discarded).
    """
    argv = [sys.executable if a == "python" and i == 0 else a for i, a in enumerate(argv)]
    out = open(log, "ab") if log else subprocess.DEVNULL  # noqa: SIM115 - the child owns it
    try:
        return subprocess.Popen(
            argv,
            env={**os.environ, **(env or {})},
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    finally:
        if log:
            out.close()  # type: ignore[union-attr]


def process_cpu_seconds(pid: int) -> float | None:
    """CPU seconds (user + system) a live process has used so far, from ``/proc``.

    Returns:
        The seconds, or None where ``/proc/<pid>/stat`` cannot be read (not Linux,
        or the process is gone).
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # the command name (field 2) may hold spaces: count fields after its ")"
    fields = stat[stat.rindex(b")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def command_cpu_seconds(command: str) -> float | None:
    """CPU seconds (user + system) used so far by every live process named ``command``.

    The name is the kernel's (``/proc/<pid>/stat`` field 2, e.g. ``postgres``
    for the server and each of its backends). A delta over a run counts the
    processes alive at its end: one that exits inside the window loses its
    time, so the figure can only be low, never high.

    Returns:
        The seconds, or None where ``/proc`` cannot be read (not Linux).
    """
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    wanted = f"({command})".encode()
    seconds = 0.0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone between the listing and the read
        if stat[stat.index(b"(") : stat.rindex(b")") + 1] == wanted:
            fields = stat[stat.rindex(b")") + 2 :].split()
            seconds += int(fields[11]) + int(fields[12])
    return seconds / os.sysconf("SC_CLK_TCK")


def group_cpu_seconds(pgids: Sequence[int]) -> float | None:
    """CPU seconds (user + system) used so far by every live process of the given process
    groups (a worker started by :func:`start_process` leads its own group, so its pid is
    the group's id and its children, a pool's processes, belong to it).

    Like :func:`command_cpu_seconds`, a delta counts the processes alive at its end.

    Returns:
        The seconds, or None where ``/proc`` cannot be read (not Linux).
    """
    try:
        pids = [p for p in os.listdir("/proc") if p.isdigit()]
    except OSError:
        return None
    wanted = {str(g).encode() for g in pgids}
    ticks = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue  # gone between the listing and the read
        fields = stat[stat.rindex(b")") + 2 :].split()
        if fields[2] in wanted:  # state, ppid, pgrp, ...
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


def process_rss_mb(pid: int) -> float | None:
    """Resident set size of a live process, MB (``VmRSS`` of ``/proc/<pid>/status``).

    Returns:
        The MB, or None when the process is gone or ``/proc`` cannot be read.
    """
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        return None
    return None


def open_files(pid: int) -> int | None:
    """Open file descriptors of a live process (entries of ``/proc/<pid>/fd``).

    Returns:
        The count, or None when the process is gone or ``/proc`` cannot be read.
    """
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return None


def machine_cpu_seconds() -> float | None:
    """CPU seconds the whole machine has been busy since boot, all cores, from ``/proc/stat``.

    Busy is user + nice + system + irq + softirq + steal (idle and iowait left
    out), so a delta over a run is every process's CPU in it: the workers, the
    placing process, Redis, the database server and whatever else ran.

    Returns:
        The seconds, or None where ``/proc/stat`` cannot be read (not Linux).
    """
    try:
        with open("/proc/stat", "rb") as f:
            first = f.readline().split()
    except OSError:
        return None
    # cpu user nice system idle iowait irq softirq steal ...
    ticks = [int(x) for x in first[1:9]]
    busy = ticks[0] + ticks[1] + ticks[2] + ticks[5] + ticks[6] + ticks[7]
    return busy / os.sysconf("SC_CLK_TCK")


def stop_process(proc: subprocess.Popen[bytes], timeout: float = 10.0) -> None:
    """SIGTERM the process group, wait up to ``timeout`` seconds, then SIGKILL it."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # children a SIGTERM left behind
    except ProcessLookupError:
        pass
    if proc.poll() is None:
        proc.wait(5)


@dataclass(frozen=True)
class Drain:
    """How a backlog drained.

    Attributes:
        jobs: jobs finished inside the timed window.
        seconds: the timed window, from the first job taken to the last finished.
        complete: False when the time bound cut the run short.
        startup_seconds: from process start to the first job taken.
    """

    jobs: int
    seconds: float
    complete: bool
    startup_seconds: float

    @property
    def rate(self) -> float:
        """Jobs/s over the timed window (0 when nothing was measured)."""
        return self.jobs / self.seconds if self.seconds > 0 else 0.0


def time_drain(
    remaining: Callable[[], int],
    total: int,
    *,
    timeout: float,
    alive: Callable[[], bool] = lambda: True,
) -> Drain:
    """Time a backlog of ``total`` jobs draining (workers already started).

    The clock starts when ``remaining()`` first drops below ``total`` (worker start-up
    and imports are not counted) and stops when it reaches 0 or ``timeout`` seconds
    after the call.

    Args:
        remaining: jobs not yet finished (queued + in flight), read from Redis.
        total: the backlog at the start.
        timeout: bound on the whole wait, seconds.
        alive: False stops the wait early (the worker died).
    """
    called = time.perf_counter()
    deadline = called + timeout
    left = total
    while left >= total:
        if time.perf_counter() > deadline or not alive():
            return Drain(0, 0.0, False, time.perf_counter() - called)
        time.sleep(POLL_SECONDS)
        left = remaining()
    started, at_start = time.perf_counter(), left
    while left > 0:
        if time.perf_counter() > deadline or not alive():
            now = time.perf_counter()
            return Drain(at_start - left, now - started, False, started - called)
        time.sleep(POLL_SECONDS)
        left = remaining()
    # the first poll saw (total - at_start) jobs already done: count them over one poll
    return Drain(at_start, time.perf_counter() - started, True, started - called)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of already sorted values, nearest rank."""
    if not sorted_values:
        return float("nan")
    rank = max(int(round(q / 100.0 * len(sorted_values) + 0.5)) - 1, 0)
    return sorted_values[min(rank, len(sorted_values) - 1)]


def timed(fn: Callable[[], object]) -> float:
    """Seconds ``fn()`` took (perf_counter)."""
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t
