"""One end-to-end run (``orders demo``, ``orders chaos``) per data dir at a time.

Two runs in one data dir share its queues, its injected faults and its database:
each clears the other's faults and counts the other's orders as its own. A run
holds ``<data dir>/run.lock`` for its whole length (an ``flock``, released by
the system when its process ends, however it ends), with its command and pid
written inside; a second run is refused at once with a message naming them.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from orders.app.private_files import private_dir
from orders.domain.errors import OrdersError

LOCK_NAME = "run.lock"


class RunInProgress(OrdersError):
    """Another ``orders demo`` or ``orders chaos`` runs in the same data dir (the message
    names its command and pid)."""


class RunClaim:
    """The data dir's run lock, held until :meth:`release` (or the ``with`` block's end)
    or until the process ends, whichever comes first."""

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    def release(self) -> None:
        """Let the next run start (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> RunClaim:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def claim_run(data_dir: Path, command: str) -> RunClaim:
    """Take the data dir's run lock for this process's run.

    Args:
        data_dir: the run's data dir (created 0700 if missing).
        command: this run's command as the refusal of another names it (``demo``).

    Returns:
        The held :class:`RunClaim`.

    Raises:
        RunInProgress: another process holds the lock; nothing was done.
        OSError: the lock file cannot be created.
    """
    path = private_dir(data_dir) / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            raise RunInProgress(_refusal(fd, data_dir)) from None
        finally:
            os.close(fd)
    except BaseException:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"command": command, "pid": os.getpid()}).encode(), 0)
    return RunClaim(fd)


def _refusal(fd: int, data_dir: Path) -> str:
    holder: dict[str, object] = {}
    for _ in range(50):  # the holder writes its name right after taking the lock
        try:
            holder = json.loads(os.pread(fd, 512, 0) or b"{}")
        except ValueError:
            holder = {}
        if holder:
            break
        time.sleep(0.01)
    command = holder.get("command", "demo")
    command = command if command in ("demo", "chaos") else "run"
    pid = holder.get("pid")
    who = f"pid {pid}" if isinstance(pid, int) else "pid unknown"
    return (
        f"another `orders {command}` ({who}) is running in data dir {data_dir}: one run "
        "at a time per data dir (they would share its queues, faults and orders); wait "
        "for it to end, or give this run a data dir of its own (ORDERS_DATA_DIR; "
        "`orders chaos` makes a fresh one unless --data-dir is given)"
    )
