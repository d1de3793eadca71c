"""Markdown tables of saved results (for docs/performance.md)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .report import _pick, rate, ratio


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def peers_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """The side-by-side throughput table, rates in jobs/s, ratios library / orderflow."""
    libs = list(dict.fromkeys(r["library"] for r in rows if r["kind"] == "throughput"))
    base_d, base_t = _pick(rows, "orderflow", "default"), _pick(rows, "orderflow", "tuned-2core")
    out = []
    for lib in libs:
        d, t = _pick(rows, lib, "default"), _pick(rows, lib, "tuned-2core")
        bulk = t.get("enqueue_rate") if t and t["enqueue_api"] != "single call per job" else None
        cut = lambda r: "" if r.get("drain_complete", True) else "*"  # noqa: E731
        out.append(
            [
                lib,
                d.get("version", "?"),
                d.get("guarantee", "?"),
                rate(d.get("enqueue_rate")),
                ratio(d.get("enqueue_rate"), base_d.get("enqueue_rate")),
                rate(bulk),
                ratio(bulk, base_t.get("enqueue_rate")) if bulk else "-",
                rate(d.get("drain_rate")) + cut(d),
                ratio(d.get("drain_rate"), base_d.get("drain_rate")),
                f"{rate(t.get('drain_rate'))}{cut(t)} ({t.get('worker', '')})",
                ratio(t.get("drain_rate"), base_t.get("drain_rate")),
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
        ],
        out,
    )


def latency_markdown(rows: Sequence[dict[str, Any]]) -> str:
    """Enqueue-to-start percentiles in ms."""
    lat = [r for r in rows if r["kind"] == "latency"]
    return _table(
        ["library", "offered (jobs/s)", "jobs", "p50 ms", "p95 ms", "p99 ms", "max ms"],
        [
            [
                r["library"],
                rate(r["offered_rate"]),
                str(r["n"]),
                f"{r['p50_ms']:.2f}",
                f"{r['p95_ms']:.2f}",
                f"{r['p99_ms']:.2f}",
                f"{r['max_ms'] or 0:.2f}",
            ]
            for r in lat
        ],
    )


def fields_markdown(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Any rows, the given fields as columns (floats to one decimal)."""

    def cell(v: Any) -> str:
        return f"{v:,.1f}" if isinstance(v, float) else ("-" if v is None else str(v))

    return _table(list(columns), [[cell(r.get(c)) for c in columns] for r in rows])
