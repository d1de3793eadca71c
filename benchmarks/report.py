"""The printed table (rich) and the JSON results file."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

RESULTS = Path(__file__).resolve().parent / "results"


def write_results(
    rows: Sequence[dict[str, Any]], suffix: str = "", *, directory: Path | None = None
) -> Path:
    """Write rows to ``<directory>/<date>[-suffix].json`` and return the path.

    Args:
        rows: the result rows (JSON-serialisable dicts).
        suffix: appended to the date, e.g. ``"orderflow-e2e"``.
        directory: where to write; ``benchmarks/results`` by default.

    An earlier results file of the same name is never replaced: the new one
    takes the first free ``-2``, ``-3``, ... after the name (a second run on
    the same day used to overwrite the committed figures of the first).
    The file is created exclusively (``"x"`` mode), so two runs finishing at
    once cannot both take the same name.
    """
    directory = RESULTS if directory is None else directory
    directory.mkdir(parents=True, exist_ok=True)
    name = time.strftime("%Y-%m-%d") + (f"-{suffix}" if suffix else "")
    text = json.dumps(list(rows), indent=2) + "\n"
    for n in range(1, 1000):
        path = directory / (f"{name}.json" if n == 1 else f"{name}-{n}.json")
        try:
            with path.open("x") as f:
                f.write(text)
        except FileExistsError:
            continue
        return path
    raise FileExistsError(f"{directory}/{name}-*.json: 999 results files of that name already")


def rate(value: float | None) -> str:
    """A jobs/s figure with thousands separators ("-" for none)."""
    return "-" if value is None else f"{value:,.0f}"


def ratio(value: float | None, base: float | None) -> str:
    """``value / base`` as ``0.05x`` ("-" when either is missing)."""
    if not value or not base:
        return "-"
    r = value / base
    return f"{r:.3f}x" if r < 0.1 else f"{r:.2f}x"


def _pick(rows: Sequence[dict[str, Any]], library: str, variant: str) -> dict[str, Any]:
    for row in rows:
        if row["kind"] == "throughput" and row["library"] == library and row["variant"] == variant:
            return row
    return {}


def peers_table(rows: Sequence[dict[str, Any]]) -> Table:
    """One row per library: enqueue and drain rates (jobs/s) and each as a ratio to orderflow."""
    libraries = list(dict.fromkeys(r["library"] for r in rows if r["kind"] == "throughput"))
    base_d, base_t = _pick(rows, "orderflow", "default"), _pick(rows, "orderflow", "tuned-2core")
    table = Table(title="No-op jobs, one worker process, same Redis, same run (jobs/s)")
    for col in (
        "library",
        "version",
        "guarantee",
        "enqueue",
        "ratio",
        "bulk enqueue",
        "ratio",
        "drain default",
        "ratio",
        "drain tuned",
        "ratio",
    ):
        table.add_column(
            col, justify="left" if col in ("library", "version", "guarantee") else "right"
        )
    for lib in libraries:
        d, t = _pick(rows, lib, "default"), _pick(rows, lib, "tuned-2core")
        bulk = t.get("enqueue_rate") if t and t["enqueue_api"] != "single call per job" else None
        cut = lambda row: "" if not row or row.get("drain_complete", True) else "*"  # noqa: E731
        table.add_row(
            lib,
            (d or t).get("version", "?"),
            (d or t).get("guarantee", "?"),
            rate(d.get("enqueue_rate")),
            ratio(d.get("enqueue_rate"), base_d.get("enqueue_rate")),
            rate(bulk),
            ratio(bulk, base_t.get("enqueue_rate")) if bulk else "-",
            rate(d.get("drain_rate")) + cut(d),
            ratio(d.get("drain_rate"), base_d.get("drain_rate")),
            rate(t.get("drain_rate")) + cut(t),
            ratio(t.get("drain_rate"), base_t.get("drain_rate")),
        )
    table.caption = (
        "ratio = library / orderflow. * = cut short by the time bound; rate over the jobs "
        "finished. Tuned drain follows the bulk enqueue where a bulk API exists."
    )
    return table


def latency_table(rows: Sequence[dict[str, Any]]) -> Table | None:
    """Enqueue-to-start percentiles (ms) of the latency rows, or None when there are none."""
    lat = [r for r in rows if r["kind"] == "latency"]
    if not lat:
        return None
    table = Table(
        title=f"Enqueue-to-start latency at {lat[0]['offered_rate']:,.0f} jobs/s "
        f"offered for {lat[0]['seconds']:.0f} s (ms)"
    )
    for col in ("library", "jobs", "started", "p50", "p95", "p99", "max", "p99 ratio"):
        table.add_column(col, justify="left" if col == "library" else "right")
    base = next((r["p99_ms"] for r in lat if r["library"] == "orderflow"), None)
    for r in lat:
        table.add_row(
            r["library"],
            str(r["n"]),
            str(r["started"]),
            f"{r['p50_ms']:.2f}",
            f"{r['p95_ms']:.2f}",
            f"{r['p99_ms']:.2f}",
            f"{r['max_ms'] or 0:.2f}",
            ratio(r["p99_ms"], base),
        )
    return table


def generic_table(title: str, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> Table:
    """A plain table of the given row fields (floats rounded for reading)."""
    table = Table(title=title)
    for col in columns:
        table.add_column(col, justify="right")
    for r in rows:
        cells = []
        for col in columns:
            v = r.get(col)
            cells.append(f"{v:,.1f}" if isinstance(v, float) else ("-" if v is None else str(v)))
        table.add_row(*cells)
    return table


def show(*tables: Table | None) -> None:
    """Print tables to stdout."""
    console = Console(width=200)
    for table in tables:
        if table is not None:
            console.print(table)
