"""Markdown tables of saved results (for docs/performance.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .report import _pick, cpu_hog_cell, each_run, load_span, ms, rate, ratio, with_range


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def peers_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The side-by-side throughput table, rates in jobs/s as median (min-max) of the runs,
    ratios of medians library / orderflow."""
    libs = list(dict.fromkeys(r["library"] for r in rows if r["kind"] == "throughput"))
    base_d, base_t = _pick(rows, "orderflow", "default"), _pick(rows, "orderflow", "tuned-2core")
    out = []
    for lib in libs:
        d, t = _pick(rows, lib, "default"), _pick(rows, lib, "tuned-2core")
        bulk = bool(t) and t["enqueue_api"] != "single call per job"
        cut = lambda r: "" if r.get("drain_complete", True) else "*"  # noqa: E731
        out.append(
            [
                lib,
                d.get("version", "?"),
                d.get("guarantee", "?"),
                with_range(d, "enqueue_rate", rate),
                ratio(d.get("enqueue_rate"), base_d.get("enqueue_rate")),
                with_range(t, "enqueue_rate", rate) if bulk else "-",
                ratio(t.get("enqueue_rate"), base_t.get("enqueue_rate")) if bulk else "-",
                with_range(d, "drain_rate", rate) + cut(d),
                ratio(d.get("drain_rate"), base_d.get("drain_rate")),
                f"{with_range(t, 'drain_rate', rate)}{cut(t)} ({t.get('worker', '')})",
                ratio(t.get("drain_rate"), base_t.get("drain_rate")),
                load_span([x for x in (d, t) if x]),
            ]
        )
    return _table(
        [
            "library",
            "version",
            "guarantee",
            "enqueue",
            "ratio",
            "bulk enqueue",
            "ratio",
            "drain, defaults",
            "ratio",
            "drain, tuned (settings)",
            "ratio",
            "load 1m",
        ],
        out,
    )


def latency_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Enqueue-to-start percentiles in ms, median (min-max) of the runs, each run's p99 and
    max, and whether a second CPU-bound process ran beside them (the cores it took)."""
    lat = [r for r in rows if r["kind"] == "latency"]
    return _table(
        [
            "library",
            "offered (jobs/s)",
            "jobs",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "max ms",
            "p99 of each run",
            "max of each run",
            "CPU hog",
            "load 1m",
        ],
        [
            [
                r["library"],
                rate(r["offered_rate"]),
                with_range(r, "n", rate),
                with_range(r, "p50_ms", ms),
                with_range(r, "p95_ms", ms),
                with_range(r, "p99_ms", ms),
                with_range(r, "max_ms", ms),
                each_run(r, "p99_ms", ms),
                each_run(r, "max_ms", ms),
                cpu_hog_cell(r),
                load_span([r]),
            ]
            for r in lat
        ],
    )


def fields_markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Any rows, the given fields as columns (floats to one decimal)."""

    def cell(v: Any) -> str:
        return f"{v:,.1f}" if isinstance(v, float) else ("-" if v is None else str(v))

    return _table(list(columns), [[cell(r.get(c)) for c in columns] for r in rows])
