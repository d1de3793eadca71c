"""The printed table (rich) and the JSON results file."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
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


def worst_count(row: dict[str, Any], field: str) -> str:
    """The largest run's count of a summarised row; "?" when a run has none (unknown)."""
    if None in row.get(f"{field}_runs", []):
        return "?"
    return rate(row.get(f"{field}_max", row.get(field)))


def with_range(row: dict[str, Any], field: str, fmt: Callable[[float | None], str]) -> str:
    """A summarised figure as ``median (min-max)``; the median alone for a single run.

    Args:
        row: a row from ``benchmarks.harness.summarize`` (or a single run).
        field: the figure's name; ``<field>_min`` and ``<field>_max`` give the range.
        fmt: formats one value (e.g. :func:`rate`).
    """
    value, low, high = row.get(field), row.get(f"{field}_min"), row.get(f"{field}_max")
    if value is None or low is None or high is None or row.get("runs", 1) <= 1:
        return fmt(value)
    return f"{fmt(value)} ({fmt(low)}-{fmt(high)})"


def ms(value: float | None) -> str:
    """Milliseconds to two decimals ("-" for none)."""
    return "-" if value is None else f"{value:.2f}"


def load_span(rows: Sequence[dict[str, Any]]) -> str:
    """The lowest and highest 1-minute load average read around the rows' runs."""
    readings = [
        float(x)
        for r in rows
        for pair in r.get("loadavg_1m_runs")
        or [[r.get("loadavg_1m_before"), r.get("loadavg_1m_after")]]
        for x in pair
        if x is not None
    ]
    if not readings:
        return "-"
    return f"{min(readings):.2f}-{max(readings):.2f}"


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
    """One row per library: enqueue and drain rates (jobs/s), median (min-max) of its runs,
    each median as a ratio to orderflow's, and the load average around its runs."""
    libraries = list(dict.fromkeys(r["library"] for r in rows if r["kind"] == "throughput"))
    base_d, base_t = _pick(rows, "orderflow", "default"), _pick(rows, "orderflow", "tuned-2core")
    runs = max((r.get("runs", 1) for r in rows if r["kind"] == "throughput"), default=1)
    table = Table(
        title="No-op jobs, one worker process, same Redis, same run "
        f"(jobs/s, median of {runs} interleaved runs (min-max))"
    )
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
        "load 1m",
    ):
        table.add_column(
            col, justify="left" if col in ("library", "version", "guarantee") else "right"
        )
    for lib in libraries:
        d, t = _pick(rows, lib, "default"), _pick(rows, lib, "tuned-2core")
        bulk = t and t["enqueue_api"] != "single call per job"
        cut = lambda row: "" if not row or row.get("drain_complete", True) else "*"  # noqa: E731
        table.add_row(
            lib,
            (d or t).get("version", "?"),
            (d or t).get("guarantee", "?"),
            with_range(d, "enqueue_rate", rate),
            ratio(d.get("enqueue_rate"), base_d.get("enqueue_rate")),
            with_range(t, "enqueue_rate", rate) if bulk else "-",
            ratio(t.get("enqueue_rate"), base_t.get("enqueue_rate")) if bulk else "-",
            with_range(d, "drain_rate", rate) + cut(d),
            ratio(d.get("drain_rate"), base_d.get("drain_rate")),
            with_range(t, "drain_rate", rate) + cut(t),
            ratio(t.get("drain_rate"), base_t.get("drain_rate")),
            load_span([x for x in (d, t) if x]),
        )
    table.caption = (
        "ratio = library's median / orderflow's median. * = a run was cut short by the time "
        "bound; its rate is over the jobs finished. Tuned drain follows the bulk enqueue "
        "where a bulk API exists. load 1m: lowest-highest 1-minute load average read "
        "around the library's runs."
    )
    return table


def each_run(row: dict[str, Any], field: str, fmt: Callable[[float | None], str]) -> str:
    """Every run's value of a summarised row's figure, in run order, ``a / b / c``."""
    runs = row.get(f"{field}_runs") or [row.get(field)]
    return " / ".join(fmt(x) for x in runs)


def cpu_hog_cell(row: dict[str, Any]) -> str:
    """Whether a latency row ran beside a second CPU-bound process, and the cores it took
    over the timed window, median (min-max) of the runs: ``yes, 0.98 (0.95-1.00) cores``."""
    if not row.get("cpu_hog"):
        return "no"
    return f"yes, {with_range(row, 'cpu_hog_cores', lambda v: '-' if v is None else f'{v:.2f}')}"


def latency_title(rows: Sequence[dict[str, Any]]) -> str:
    """What the latency rows measured: offered rate, length, runs, and the CPU hog."""
    first = rows[0]
    hog = any(r.get("cpu_hog") for r in rows)
    return (
        f"Enqueue-to-start latency at {first['offered_rate']:,.0f} jobs/s offered for "
        f"{first['seconds']:.0f} s{', beside a second CPU-bound process' if hog else ''} "
        f"(ms, median of {first.get('runs', 1)} interleaved runs (min-max))"
    )


def latency_table(rows: Sequence[dict[str, Any]]) -> Table | None:
    """Enqueue-to-start percentiles (ms) of the latency rows, median (min-max) of their
    runs, each run's p99 and max, the CPU hog beside them (if any), or None when there
    are no latency rows."""
    lat = [r for r in rows if r["kind"] == "latency"]
    if not lat:
        return None
    table = Table(title=latency_title(lat))
    columns = ("library", "jobs", "p50", "p95", "p99", "max", "p99 ratio", "p99 each run")
    for col in (*columns, "max each run", "CPU hog", "load 1m"):
        table.add_column(col, justify="left" if col == "library" else "right")
    base = next((r["p99_ms"] for r in lat if r["library"] == "orderflow"), None)
    for r in lat:
        table.add_row(
            r["library"],
            with_range(r, "n", rate),
            with_range(r, "p50_ms", ms),
            with_range(r, "p95_ms", ms),
            with_range(r, "p99_ms", ms),
            with_range(r, "max_ms", ms),
            ratio(r["p99_ms"], base),
            each_run(r, "p99_ms", ms),
            each_run(r, "max_ms", ms),
            cpu_hog_cell(r),
            load_span([r]),
        )
    return table


def e2e_peers_tables(rows: Sequence[dict[str, Any]]) -> list[Table]:
    """One table per database of the ``e2e-peer`` rows: orders/s and CPU ms per order as
    median (min-max) of the runs, orders/s as a ratio of medians to orderflow's, and the
    worst run's step runs beyond the first ("?" when a run's counts fell short), parts
    whose stock does not add up, orders lost and completed orders missing an effect."""
    tables = []
    peers = [r for r in rows if r["kind"] == "e2e-peer"]
    for database in dict.fromkeys(r["database"] for r in peers):
        mine = [r for r in peers if r["database"] == database]
        base = next((r for r in mine if r["library"] == "orderflow"), {})
        runs = max((r.get("runs", 1) for r in mine), default=1)
        table = Table(
            title=f"The order workflow end to end on {database}: {mine[0]['n']:,} orders, "
            f"{mine[0]['worker_processes']} worker processes each "
            f"(median of {runs} interleaved runs (min-max))"
        )
        for col in (
            "library",
            "version",
            "workers",
            "orders/s",
            "ratio",
            "CPU ms/order (machine)",
            "CPU ms/order (own)",
            "runs again",
            "stock off",
            "lost",
            "missing",
            "load 1m",
        ):
            table.add_column(col, justify="left" if col in ("library", "workers") else "right")
        for r in mine:
            table.add_row(
                r["library"],
                r["version"],
                r["worker"],
                with_range(r, "orders_per_second", rate),
                ratio(r["orders_per_second"], base.get("orders_per_second")),
                with_range(r, "cpu_ms_per_order", ms),
                with_range(r, "own_cpu_ms_per_order", ms),
                worst_count(r, "duplicate_runs"),
                rate(r.get("inventory_drift_parts_max", r.get("inventory_drift_parts"))),
                rate(r.get("lost_orders_max", r.get("lost_orders"))),
                rate(r.get("missing_effects_max", r.get("missing_effects"))),
                load_span([r]),
            )
        table.caption = (
            "ratio = library's median / orderflow's median. The worst run's: runs again = "
            "step runs beyond the first of an order's step (redeliveries the idempotent "
            "effects absorbed; ? = the workers' counts fell short of the runs the tables "
            "show), stock off = parts whose stock does not add up (a stock effect applied "
            "twice), lost = orders not finished by the deadline, missing = completed orders "
            "without one of their effects. CPU: the whole machine's over the timed window, "
            "and the run's own processes' (workers, Redis, PostgreSQL, placing)."
        )
        tables.append(table)
    return tables


def e2e_peers_summary(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Per database, orderflow's median orders/s over the faster peer's (the target is 5x)."""
    lines = []
    peers = [r for r in rows if r["kind"] == "e2e-peer"]
    for database in dict.fromkeys(r["database"] for r in peers):
        mine = [r for r in peers if r["database"] == database]
        base = next((r for r in mine if r["library"] == "orderflow"), None)
        others = [r for r in mine if r["library"] != "orderflow"]
        if base is None or not others:
            continue
        fastest = max(others, key=lambda r: r["orders_per_second"] or 0.0)
        if not fastest["orders_per_second"]:
            continue
        times = base["orders_per_second"] / fastest["orders_per_second"]
        lines.append(
            f"{database}: orderflow {rate(base['orders_per_second'])} orders/s = "
            f"{times:.2f}x the faster peer ({fastest['library']}, "
            f"{rate(fastest['orders_per_second'])}), medians of {base.get('runs', 1)} runs "
            "(target: 5x)"
        )
    return lines


def range_table(
    title: str, rows: Sequence[dict[str, Any]], plain: Sequence[str], ranged: Sequence[str]
) -> Table:
    """A table of summarised rows: ``plain`` fields as they are, ``ranged`` ones as
    ``median (min-max)`` (one decimal), and the load average around the runs."""
    table = Table(title=title)
    for col in [*plain, *ranged, "load 1m"]:
        table.add_column(col, justify="right")

    def one(v: float | None) -> str:
        return "-" if v is None else f"{v:,.1f}"

    for r in rows:
        table.add_row(
            *[one(r.get(c)) if isinstance(r.get(c), float) else str(r.get(c, "-")) for c in plain],
            *[with_range(r, c, one) for c in ranged],
            load_span([r]),
        )
    return table


def soak_table(rows: Sequence[dict[str, Any]]) -> Table:
    """The soak's samples: orders placed and waiting, each worker's RSS (MB) and open
    files, Redis's used_memory (MB) and the load average."""
    samples = [r for r in rows if r["kind"] == "soak-sample"]
    summary = next((r for r in rows if r["kind"] == "soak"), {})
    workers = [k.removesuffix("_open_files") for k in samples[0] if k.endswith("_open_files")]
    table = Table(
        title=f"Soak on {summary.get('database', '?')}: {summary.get('rate', 0):,.0f} orders/s "
        f"offered, {summary.get('achieved_rate', 0):,.0f} placed (drain rate "
        f"{summary.get('drain_rate', 0):,.0f}), retention "
        f"{summary.get('retention_seconds', '?')} s, judged from "
        f"{summary.get('steady_from_seconds', 0):.0f} s"
    )
    for col in ["s", "placed", "backlog", *(f"{w} MB/files" for w in workers), "Redis MB", "load"]:
        table.add_column(col, justify="right")
    for r in samples:
        table.add_row(
            f"{r['elapsed_seconds']:.0f}",
            f"{r['placed']:,}",
            f"{r['backlog']:,}",
            *(f"{r.get(f'{w}_rss_mb', 0):.0f}/{r.get(f'{w}_open_files', '-')}" for w in workers),
            f"{r['redis_used_memory_mb']:.1f}",
            f"{r['loadavg_1m']:.2f}",
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
