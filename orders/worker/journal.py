"""The attempt journal's writer: what this worker process leased and gave up.

With ``ORDERS_CHAOS_JOURNAL_DIR`` set (``orders chaos`` sets it for its workers;
``orders.chaos.journal`` reads it back and judges) each worker process appends
one JSON line per event to its own file there, written with one ``write(2)`` on
an ``O_APPEND`` descriptor, so a line survives the SIGKILL of its process:

- ``lease``: a job leased, with its fencing number;
- ``lost``: an attempt its own process gave up (its time limit passed, its lane
  was abandoned, an extend was refused, its attempt guard or the database refused
  its commit; ADR 0023), which must then never commit;
- ``inj``: a fault injected into a run (``orders.worker.faults``). The Redis
  counters count them too, but a count written while Redis is down, or in the
  AOF tail a crash drops, is lost; the journal's line is not, so the report's
  "this fault happened" does not depend on the Redis the run is killing.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from reliable_queue import Lease, RawJob
from reliable_queue.execution import Dead, Outcome, Retry, fencing_number

log = logging.getLogger("orders.worker.journal")

JOURNAL_ENV = "ORDERS_CHAOS_JOURNAL_DIR"
"""Environment variable naming the journal directory (unset: no journal)."""

_LOST_PREFIXES = {"AttemptLost": "attempt_lost", "FencedOut": "fenced_out"}


def lost_reason(outcome: Outcome) -> str | None:
    """Why an outcome means its attempt no longer held its step, or None.

    Args:
        outcome: a settled run's outcome (``Succeeded``, ``Retry`` or ``Dead``).

    Returns:
        ``attempt_lost`` (the attempt guard refused the commit), ``fenced_out`` (the
        database refused it), or None: the run succeeded or failed on its own (a
        handler error may come after a commit and proves nothing about it), or
        timed out (a time-out during the commit block does not stop that block;
        one before it is journaled by :meth:`AttemptJournal.attempt_lost`).
    """
    if isinstance(outcome, Retry | Dead):
        head = outcome.error.split(":", 1)[0]
        return _LOST_PREFIXES.get(head)
    return None


class AttemptJournal:
    """Appends this process's events to ``<directory>/<pid>.jsonl``.

    Args:
        directory: the journal directory (created if missing).

    Raises:
        OSError: the file cannot be opened.
    """

    def __init__(self, directory: Path) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.path = directory / f"{os.getpid()}.jsonl"
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._lock = threading.Lock()

    def _write(self, records: Iterable[dict[str, Any]]) -> None:
        data = "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records).encode()
        if data:
            with self._lock:
                os.write(self._fd, data)

    def leased(self, jobs: Sequence[RawJob]) -> None:
        """Worker ``after_fetch`` hook: one ``lease`` line per job just leased."""
        self._write(
            {"e": "lease", "q": j.queue, "job": j.job_id, "n": fencing_number(j.token)}
            for j in jobs
        )

    def settled(self, job: RawJob, outcome: Outcome) -> None:
        """Worker ``on_outcome`` part: a ``lost`` line when the outcome gave the attempt up."""
        why = lost_reason(outcome)
        if why is not None:
            n = fencing_number(outcome.lease.token)
            self._write([{"e": "lost", "q": job.queue, "job": job.job_id, "n": n, "why": why}])

    def attempt_lost(self, queue: str, lease: Lease, reason: str) -> None:
        """Worker ``on_attempt_lost`` hook: a ``lost`` line (the process took the lease
        from the attempt before its commit block: ``timed_out``, ``abandoned`` or
        ``lease_lost``)."""
        n = fencing_number(lease.token)
        self._write([{"e": "lost", "q": queue, "job": lease.job_id, "n": n, "why": reason}])

    def injected(self, step: str, kind: str) -> None:
        """Fault middleware ``on_injected`` part: an ``inj`` line (``kind`` e.g. ``slow``,
        ``fail``, ``crash``; ``step`` the step it was injected into)."""
        self._write([{"e": "inj", "s": step, "k": kind}])

    def recording(
        self, then: Callable[[RawJob, Outcome], None]
    ) -> Callable[[RawJob, Outcome], None]:
        """An ``on_outcome`` hook that journals the outcome (:meth:`settled`), then calls
        ``then``; a journal that cannot be written is logged and does not stop ``then``."""

        def hook(job: RawJob, outcome: Outcome) -> None:
            try:
                self.settled(job, outcome)
            except OSError as exc:
                log.warning("attempt journal not written: %s", exc)
            then(job, outcome)

        return hook

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
