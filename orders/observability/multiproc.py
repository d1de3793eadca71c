"""The Prometheus multi-process folder: where worker processes write their metrics.

prometheus-client's multi-process mode keeps each process's counters and
histograms in memory-mapped files of one folder; any process can then serve the
sum over all of them. orderflow puts that folder in the data dir, one per queue
prefix, so every worker process of one data dir adds to the same figures and
``orders web`` / ``orders watch`` / ``orders worker --metrics-port`` read them.
Files are named after a slot each running process holds, so restarts reuse them.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO

from orders.app.settings import Settings

ENV = "PROMETHEUS_MULTIPROC_DIR"


def metrics_dir(settings: Settings) -> Path:
    """Return ``<data dir>/metrics/<queue prefix>`` (absolute; not created)."""
    return settings.resolved_data_dir() / "metrics" / settings.queue_prefix


_held: list[IO[str]] = []  # the slot lock of this process, held until it exits
_slot: list[str] = []  # its name


def current_slot() -> str | None:
    """The slot this process records under (``slot<n>``), or None before
    :func:`enable_multiprocess`."""
    return _slot[0] if _slot else None


def claim_slot(path: Path, limit: int = 4096) -> tuple[str, IO[str]]:
    """Take the lowest free slot of ``path``: an exclusive ``flock`` on ``slot-<n>.lock``.

    A process writes its metrics to files named after its slot, not its pid, so
    a restarted worker takes over the files of one that exited (its counts go
    on from there) and the folder holds one set of files per concurrently
    running process instead of one per process ever started. The lock goes
    with the process, however it ends (kill -9 included).

    Returns:
        ``(slot name, open lock file)``; keep the file open while recording.

    Raises:
        OSError: no free slot below ``limit``, or the folder is not writable.
    """
    for number in range(limit):
        handle = open(path / f"slot-{number}.lock", "a")  # noqa: SIM115 - held for life
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            handle.close()
            continue
        return f"slot{number}", handle
    raise OSError(f"no free metrics slot in {path}")


def enable_multiprocess(path: Path) -> Path:
    """Make metrics created from now on in this process write into ``path``.

    Sets ``PROMETHEUS_MULTIPROC_DIR`` (inherited by child processes), claims a
    slot (see :func:`claim_slot`) and switches prometheus-client's value class
    to files named after it, so it works even when the library was imported
    before. Call it once per process, before creating any metric.

    Args:
        path: the folder (created if missing).

    Returns:
        ``path`` as given.

    Raises:
        OSError: the folder cannot be created, or no slot is free.
    """
    from prometheus_client import values

    path.mkdir(parents=True, exist_ok=True)
    os.environ[ENV] = str(path)
    if not _held:
        slot, handle = claim_slot(path)
        _held.append(handle)
        _slot.append(slot)
        for stale in path.glob(f"gauge_*_{slot}.db"):  # a previous holder's readings
            stale.unlink(missing_ok=True)
        values.ValueClass = values.MultiProcessValue(process_identifier=lambda: slot)
    return path


def has_samples(path: Path) -> bool:
    """True when some process has written metrics into ``path``."""
    return path.is_dir() and any(path.glob("*.db"))


def live_slots(path: Path) -> set[str]:
    """The slots of ``path`` held by a running process now (``{"slot0", ...}``).

    A slot's lock is held for its process's life (:func:`claim_slot`), so a lock that
    cannot be taken shared belongs to a live process. The probe holds a free slot's
    lock for an instant: a process claiming that slot at that very instant takes the
    next one instead.
    """
    live: set[str] = set()
    for lock in path.glob("slot-*.lock"):
        try:
            handle = open(lock)  # noqa: SIM115 - closed below, however the probe ends
        except OSError:
            continue
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError:
            live.add("slot" + lock.stem.removeprefix("slot-"))
        finally:
            handle.close()  # also releases a lock the probe took
    return live


def slot_of(file: Path) -> str:
    """The slot a metrics file belongs to (``gauge_livesum_slot3.db`` -> ``slot3``)."""
    return file.stem.rsplit("_", 1)[-1]
