"""The attempt journal of a chaos run, read back and judged.

Two invariants need facts that neither the database nor Redis keeps, and that
must not come from the code they judge (the fencing layers of ADR 0023); the
workers write them (``orders.worker.journal``):

- which fencing numbers the queue handed out: a number handed out twice on one
  queue means the counter went back, e.g. after Redis lost an AOF tail;
- which attempts their own process gave up (timed out, refused by the attempt
  guard, fenced out). Such an attempt must never commit: a done step row
  carrying its fencing number is an effect committed by an attempt that did
  not hold the step.

Everything here is pure but :func:`read_journal`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

FENCING_REISSUED = "fencing_number_never_reissued"
LAPSED_COMMIT = "no_effect_from_an_attempt_that_lost_its_step"

JOURNAL_INVARIANTS: dict[str, str] = {
    FENCING_REISSUED: "no fencing number is handed out twice on a queue, Redis data losses "
    "included",
    LAPSED_COMMIT: "no step is done by an attempt its own process had given up (timed out, "
    "refused by its attempt guard, fenced out)",
}
"""Journal invariant name -> what it states."""


@dataclass
class Journal:
    """Every process's events, read back.

    Attributes:
        leases: ``(queue, fencing number)`` -> job ids it was handed out for, one
            entry per lease line (a number handed out twice has two).
        lost: ``(queue, fencing number)`` -> why its process gave that attempt up.
        injected: counter field ``injected:<kind>:<step>`` -> faults journaled (the
            same names as ``orders.worker.counters``).
        unreadable: lines that were not JSON events (a torn last line).
    """

    leases: dict[tuple[str, int], list[str]] = field(default_factory=dict)
    lost: dict[tuple[str, int], str] = field(default_factory=dict)
    injected: dict[str, int] = field(default_factory=dict)
    unreadable: int = 0

    def lost_by_reason(self) -> dict[str, int]:
        """Attempts given up, per reason (for the report)."""
        counts: dict[str, int] = {}
        for why in self.lost.values():
            counts[why] = counts.get(why, 0) + 1
        return counts


def parse_lines(lines: Iterable[str], into: Journal | None = None) -> Journal:
    """Add the events of journal lines to ``into`` (a new :class:`Journal` by default)."""
    journal = into or Journal()
    for line in lines:
        try:
            r = json.loads(line)
            if r["e"] == "inj":
                name = f"injected:{r['k']}:{r['s']}"
                journal.injected[name] = journal.injected.get(name, 0) + 1
                continue
            key = (str(r["q"]), int(r["n"]))
            if r["e"] == "lease":
                journal.leases.setdefault(key, []).append(str(r["job"]))
            elif r["e"] == "lost":
                journal.lost[key] = str(r["why"])
            else:
                journal.unreadable += 1
        except (ValueError, KeyError, TypeError):
            journal.unreadable += 1
    return journal


def with_journaled_faults(counters: dict[str, int], journal: Journal) -> dict[str, int]:
    """The run counters with each ``injected:*`` count raised to the journal's.

    Args:
        counters: counter field -> value, as read from Redis (a lower bound: Redis
            loses the increments it could not take or dropped in a crash).
        journal: the run's journal.

    Returns:
        A new dict: every field of ``counters``; each journaled fault field holds the
        larger of the two counts (a process killed between its counter write and its
        journal line, or a journal written by an older worker, keeps Redis's count).
    """
    merged = dict(counters)
    for name, n in journal.injected.items():
        merged[name] = max(merged.get(name, 0), n)
    return merged


def read_journal(directory: Path) -> Journal:
    """Read every ``*.jsonl`` file of the journal directory (none: an empty journal)."""
    journal = Journal()
    if directory.is_dir():
        for path in sorted(directory.glob("*.jsonl")):
            parse_lines(path.read_text(errors="replace").splitlines(), journal)
    return journal


@dataclass(frozen=True)
class DoneStep:
    """A done step row: whose effect committed, under which fencing number.

    Attributes:
        order_id: the order (the workflow's subject).
        step: the step name.
        queue: its queue.
        fencing_number: the token the row recorded when it was marked done (the
            committing attempt's; the row keeps it once done).
    """

    order_id: int
    step: str
    queue: str
    fencing_number: int


@dataclass(frozen=True)
class JournalViolation:
    """A journal invariant that did not hold.

    Attributes:
        invariant: :data:`FENCING_REISSUED` or :data:`LAPSED_COMMIT`.
        detail: what is wrong.
        order_id / queue: what it concerns, when known.
    """

    invariant: str
    detail: str
    order_id: int | None = None
    queue: str | None = None


def reissued_numbers(journal: Journal, limit: int = 50) -> list[JournalViolation]:
    """Fencing numbers handed out more than once on one queue (at most ``limit`` named)."""
    out: list[JournalViolation] = []
    for (queue, n), jobs in sorted(journal.leases.items()):
        if len(jobs) > 1 and len(out) < limit:
            out.append(
                JournalViolation(
                    FENCING_REISSUED,
                    f"fencing number {n} handed out {len(jobs)} times on {queue} "
                    f"(jobs {', '.join(sorted(set(jobs))[:3])})",
                    queue=queue,
                )
            )
    return out


def lapsed_commits(
    journal: Journal, done: Iterable[DoneStep], limit: int = 50
) -> list[JournalViolation]:
    """Done steps whose committing attempt its own process had given up.

    Args:
        journal: the run's journal.
        done: the done step rows of the run's orders.
        limit: at most this many violations are returned.

    Returns:
        One :data:`LAPSED_COMMIT` violation per such step.
    """
    out: list[JournalViolation] = []
    for row in done:
        why = journal.lost.get((row.queue, row.fencing_number))
        if why is not None and len(out) < limit:
            out.append(
                JournalViolation(
                    LAPSED_COMMIT,
                    f"step {row.step} is done by attempt {row.fencing_number}, which its "
                    f"worker had given up ({why})",
                    order_id=row.order_id,
                    queue=row.queue,
                )
            )
    return out
