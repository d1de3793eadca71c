"""Step runs of the end-to-end peer benchmark: how many ran again an order's step already done.

Contract: pure. Every library's runs become one :class:`StepRuns`: per step, the orders
whose step ran (committed) at least once, and the runs beyond the first of each order's
step (a redelivery whose effect found itself already there). orderflow's workers count
them in their run counters (``applied:<step>``, ``duplicate:<step>``,
``orders.worker.counters``); the peers' tasks count each committed run per
``<step>:<order id>`` (``benchmarks.peers.order_steps``). :func:`duplicate_runs` gives
the runs beyond the first only when the counts cover every step the database says ran,
so a count that lost some runs reads "unknown", never 0. The effect tables cannot show a
step applied twice: each is unique on its natural key, and a second row is refused.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass

from orders.worker.counters import by_step


@dataclass(frozen=True)
class StepRuns:
    """What a library's workers counted.

    Attributes:
        first: step -> orders whose step ran (committed) at least once.
        again: step -> runs beyond the first of an order's step.
    """

    first: Mapping[str, int]
    again: Mapping[str, int]


def run_field(step: str, order_id: int) -> str:
    """The field a peer counts one committed run of ``step`` for ``order_id`` in."""
    return f"{step}:{order_id}"


def from_run_counts(counts: Mapping[bytes | str, bytes | str | int]) -> StepRuns:
    """The peers' counts: ``<step>:<order id>`` -> committed runs (a Redis hash as read).

    Raises:
        ValueError: a field or a count that is not of that form.
    """
    first: Counter[str] = Counter()
    again: Counter[str] = Counter()
    for raw_field, raw_count in counts.items():
        field = raw_field.decode() if isinstance(raw_field, bytes) else raw_field
        step, sep, order = field.rpartition(":")
        if not sep or not step or not order.isdigit():
            raise ValueError(f"not a <step>:<order id> run count: {field!r}")
        runs = int(raw_count)
        if runs < 1:
            raise ValueError(f"run count of {field!r} is {runs}, not >= 1")
        first[step] += 1
        again[step] += runs - 1
    return StepRuns(dict(first), dict(again))


def from_counters(counters: Mapping[str, int]) -> StepRuns:
    """orderflow's run counters (``Counters.read()``): ``applied:<step>`` ran first,
    ``duplicate:<step>`` found the step done."""
    return StepRuns(by_step(dict(counters), "applied"), by_step(dict(counters), "duplicate"))


def duplicate_runs(runs: StepRuns, expected: Mapping[str, int]) -> int | None:
    """Runs beyond the first of an order's step, or None when the counts fall short.

    Args:
        runs: what the workers counted.
        expected: step -> orders the database says ran it (finished orders: stock for
            each, the other steps for the completed ones).

    Returns:
        The sum of ``runs.again``; None when some step's ``runs.first`` is below
        ``expected`` (runs went uncounted, so duplicates may have too).
    """
    if any(runs.first.get(step, 0) < n for step, n in expected.items()):
        return None
    return sum(runs.again.values())
