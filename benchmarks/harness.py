"""Taking turns and summing up: the order libraries run in, and the figures kept of their runs.

Contract: libraries take turns in interleaved rounds (A B C, then C B A, then A B C ...), so
load that comes and goes on a shared machine falls on every library alike; every turn is
stamped with the 1-minute load average before and after it; the runs of one variant become
one row whose figure is their median, with min, max and every run's value beside it; a
ratio between libraries is a ratio of medians. ``peers``, ``e2e-peers`` and the latency
runs use it. Pure except :func:`take_turns`, which calls the turns and reads the load
average (both injected).
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


def interleaved(names: Sequence[T], runs: int) -> list[tuple[int, T]]:
    """The order of turns: ``runs`` rounds over ``names``, every other round reversed.

    Args:
        names: the libraries (or any contenders), in the first round's order.
        runs: rounds, >= 1.

    Returns:
        ``(round index, name)`` pairs in the order the turns are taken; each name
        appears once per round, ``runs`` times in all.

    Raises:
        ValueError: ``runs`` below 1.
    """
    if runs < 1:
        raise ValueError(f"runs must be >= 1, not {runs}")
    order: list[tuple[int, T]] = []
    for round_index in range(runs):
        this_round = names if round_index % 2 == 0 else list(reversed(names))
        order.extend((round_index, name) for name in this_round)
    return order


@dataclass(frozen=True)
class Spread:
    """The runs of one figure.

    Attributes:
        median: the median (the mean of the middle two for an even count).
        low / high: the smallest and largest run.
        runs: every run's value, in the order they ran.
    """

    median: float
    low: float
    high: float
    runs: tuple[float, ...]


def spread(values: Iterable[float]) -> Spread:
    """Median, min and max of the runs of one figure.

    Raises:
        ValueError: no values.
    """
    runs = tuple(values)
    if not runs:
        raise ValueError("no runs to summarise")
    return Spread(statistics.median(runs), min(runs), max(runs), runs)


def ratio_of_medians(values: Iterable[float], base: Iterable[float]) -> float | None:
    """``median(values) / median(base)``: the summary ratio of two libraries' runs.

    Returns:
        The ratio, or None when either side has no runs or the base median is 0.
    """
    mine, theirs = list(values), list(base)
    if not mine or not theirs:
        return None
    denominator = statistics.median(theirs)
    return statistics.median(mine) / denominator if denominator else None


def summarize(
    rows: Sequence[dict[str, Any]], fields: Sequence[str], *, digits: int = 3
) -> dict[str, Any]:
    """Fold the runs of one variant into one row.

    Every field of ``fields`` becomes its median, with ``<field>_min``,
    ``<field>_max`` and ``<field>_runs`` (every run's value, in run order) beside
    it; runs where the field is None are left out (all None: the field stays
    None). Boolean fields of ``fields`` become True only when every run's is.
    Any other field is the first run's. ``runs`` counts the runs;
    ``loadavg_1m_runs`` lists each run's ``[before, after]`` load average,
    ``loadavg_1m_before`` is the first run's and ``loadavg_1m_after`` the last's.

    Args:
        rows: the runs of one variant, in run order, each stamped by :func:`take_turns`.
        fields: the measured figures.
        digits: decimals the median is rounded to.

    Raises:
        ValueError: no rows.
    """
    if not rows:
        raise ValueError("no runs to summarise")
    out = dict(rows[0])
    for field in fields:
        values = [row.get(field) for row in rows]
        if any(isinstance(v, bool) for v in values):
            out[field] = all(bool(v) for v in values)
            continue
        present = [float(v) for v in values if v is not None]
        out[f"{field}_runs"] = values
        if not present:
            out[field] = out[f"{field}_min"] = out[f"{field}_max"] = None
            continue
        summary = spread(present)
        out[field] = round(summary.median, digits)
        out[f"{field}_min"] = summary.low
        out[f"{field}_max"] = summary.high
    out["runs"] = len(rows)
    out["loadavg_1m_runs"] = [
        [row.get("loadavg_1m_before"), row.get("loadavg_1m_after")] for row in rows
    ]
    out["loadavg_1m_before"] = rows[0].get("loadavg_1m_before")
    out["loadavg_1m_after"] = rows[-1].get("loadavg_1m_after")
    return out


def group_runs(
    rows: Iterable[dict[str, Any]], keys: Sequence[str]
) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """Runs grouped by the values of ``keys`` (e.g. library and variant), each group in
    run order, the groups in order of their first run."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row.get(k) for k in keys), []).append(row)
    return groups


@dataclass(frozen=True)
class Turn(Generic[T, R]):
    """One library's turn: what it returned and the load average around it.

    Attributes:
        round: 0-based round index.
        name: whose turn it was.
        result: what the turn returned.
        loadavg_before / loadavg_after: the 1-minute load average (``os.getloadavg()[0]``)
            read just before and just after the turn.
    """

    round: int
    name: T
    result: R
    loadavg_before: float
    loadavg_after: float

    def stamp(self, row: dict[str, Any]) -> dict[str, Any]:
        """``row`` with this turn's round and load averages added (a new dict); load
        readings the row already has (taken around a part of the turn) are kept."""
        return {
            "round": self.round,
            "loadavg_1m_before": round(self.loadavg_before, 2),
            "loadavg_1m_after": round(self.loadavg_after, 2),
            **row,
        }


def take_turns(
    names: Sequence[T],
    runs: int,
    turn: Callable[[T, int], R],
    *,
    loadavg: Callable[[], tuple[float, float, float]] = os.getloadavg,
) -> list[Turn[T, R]]:
    """Call ``turn(name, round)`` for every turn of :func:`interleaved`, in that order.

    Args:
        names: the contenders, in the first round's order.
        runs: rounds, >= 1.
        turn: runs one contender once and returns its result.
        loadavg: the load averages (1, 5, 15 minutes); the first is recorded.

    Returns:
        One :class:`Turn` per call, in call order.

    Raises:
        ValueError: ``runs`` below 1.
        Exception: whatever a turn raises (later turns are not taken).
    """
    done: list[Turn[T, R]] = []
    for round_index, name in interleaved(names, runs):
        before = loadavg()[0]
        result = turn(name, round_index)
        done.append(Turn(round_index, name, result, before, loadavg()[0]))
    return done
