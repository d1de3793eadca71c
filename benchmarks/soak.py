"""The soak: orderflow at half its measured rate for a long while, watched for growth.

Contract: one database (migrated, TPC-H loaded), one Redis (AOF ``everysec``) and one
``orders worker STEP`` per step at the CLI's defaults. First the drain rate is measured
(``probe`` orders placed at once, timed until all are finished); then orders are placed
at ``load_fraction`` of it (``orders place --rate``'s pacing) for ``minutes``, and every
``interval`` seconds (a minute; an eighth of a shorter run) each worker's RSS and open
file descriptors and Redis's ``used_memory`` are recorded. Finished-job records and
idempotency keys are kept for ``retention`` seconds (a fraction of the run, so that Redis
reaches its steady state inside it); the verdict (``soak_bounds.judge``) looks at the
samples after that.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orders.app.bootstrap import build
from orders.app.pacing import place_paced
from orders.app.settings import Settings
from orders.domain.steps import STEPS
from orders.worker import defaults

from . import e2e_db
from .measure import open_files, process_rss_mb, start_process, stop_process
from .peers.base import script
from .run_peers import environment
from .server import RedisServer
from .soak_bounds import (
    FD_GROWTH,
    REDIS_GROWTH,
    REDIS_SLACK_MB,
    RSS_GROWTH,
    RSS_SLACK_MB,
    Sample,
    Verdict,
    judge,
)

log = logging.getLogger("benchmarks")


@dataclass(frozen=True)
class SoakOptions:
    """Knobs of ``benchmarks soak``.

    Attributes:
        minutes: length of the paced run, minutes.
        rate: orders/s to place; None: ``load_fraction`` of the measured drain rate.
        load_fraction: share of the measured drain rate placed when ``rate`` is None.
        probe: orders placed at once to measure the drain rate.
        database: ``sqlite`` or ``postgresql``.
        scale: TPC-H scale factor (0.1: 20,000 parts, stock for millions of orders).
        interval: seconds between samples; None: a minute, or an eighth of a run shorter
            than eight minutes (at least 5 s), so a short run is judged too.
        retention: seconds finished-job records and idempotency keys are kept; None:
            a sixth of the run, at least 30 s.
        log_dir: where worker logs go.
    """

    minutes: float = 30.0
    rate: float | None = None
    load_fraction: float = 0.5
    probe: int = 2000
    database: str = "sqlite"
    scale: float = 0.1
    interval: float | None = None
    retention: int | None = None
    log_dir: Path = field(default=Path("/tmp/bench-logs/soak"))

    def interval_seconds(self) -> float:
        """Seconds between two samples."""
        if self.interval is not None:
            return self.interval
        return max(5.0, min(60.0, self.minutes * 60 / 8))

    def retention_seconds(self) -> int:
        """The retention window of the run, seconds."""
        if self.retention is not None:
            return self.retention
        return max(30, int(self.minutes * 60 / 6))

    def steady_from(self) -> float:
        """Seconds into the paced run after which the steady state is judged: the
        retention window filled, plus one sample interval."""
        return self.retention_seconds() + self.interval_seconds()


def wait_finished(factory: Any, first: int, count: int, timeout: float) -> float:
    """Wait until ``count`` orders from id ``first`` on are finished; seconds waited.

    Raises:
        TimeoutError: not within ``timeout`` seconds.
    """
    started = time.perf_counter()
    while e2e_db.finished_orders(factory, first) < count:
        if time.perf_counter() - started > timeout:
            raise TimeoutError(f"{count} orders not finished in {timeout:.0f} s")
        time.sleep(0.05)
    return time.perf_counter() - started


def take_sample(
    elapsed: float, procs: dict[str, Any], server: RedisServer, placed: int, finished: int
) -> tuple[Sample, dict[str, Any]]:
    """Read every worker's RSS and open files and Redis's memory; the sample and its row."""
    workers: dict[str, tuple[float, int]] = {}
    for name, proc in procs.items():
        rss, fds = process_rss_mb(proc.pid), open_files(proc.pid)
        if rss is not None and fds is not None and proc.poll() is None:
            workers[name] = (round(rss, 1), fds)
    info = server.client().info("memory")
    used = int(info["used_memory"]) / 2**20
    sample = Sample(elapsed, workers, round(used, 2), placed, finished)
    row = {
        "kind": "soak-sample",
        "elapsed_seconds": round(elapsed, 1),
        "placed": placed,
        "finished": finished,
        "backlog": placed - finished,
        "redis_used_memory_mb": round(used, 2),
        "redis_used_memory_rss_mb": round(int(info["used_memory_rss"]) / 2**20, 2),
        "redis_keys": int(server.client().dbsize()),
        **{f"{n}_rss_mb": v[0] for n, v in workers.items()},
        **{f"{n}_open_files": v[1] for n, v in workers.items()},
        "loadavg_1m": round(os.getloadavg()[0], 2),
    }
    return sample, row


def run_soak(opts: SoakOptions) -> tuple[list[dict[str, Any]], Verdict]:
    """The whole soak; returns the rows (every sample, then the summary) and the verdict.

    Raises:
        RuntimeError: a worker did not start serving within 120 s.
        TimeoutError: the drain-rate probe did not finish within 600 s.
    """
    logging.getLogger("alembic").setLevel(logging.WARNING)
    retention = opts.retention_seconds()
    template = e2e_db.TemplateDatabase(opts.database, opts.scale)
    procs: dict[str, Any] = {}
    try:
        log.info("%s: migrating and loading TPC-H (scale %s)", opts.database, opts.scale)
        template.prepare()
        url = template.copy("soak")
        data_dir = template.work_dir / "soak" / "data"
        with RedisServer(appendfsync="everysec") as server:
            env = {
                "ORDERS_REDIS_URL": server.url,
                "ORDERS_DATABASE_URL": url,
                "ORDERS_DATA_DIR": str(data_dir),
                "ORDERS_JOB_RETENTION_SECONDS": str(retention),
                "ORDERS_IDEMPOTENCY_WINDOW_SECONDS": str(retention),
            }
            opts.log_dir.mkdir(parents=True, exist_ok=True)
            for step in STEPS:
                procs[step] = start_process(
                    [script("orders"), "worker", step], env, opts.log_dir / f"{step}.log"
                )
            client = server.client()
            deadline = time.monotonic() + 120
            while int(client.info("clients").get("blocked_clients", 0)) < len(STEPS) * (
                defaults.CONCURRENCY
            ):
                if time.monotonic() > deadline or any(p.poll() is not None for p in procs.values()):
                    raise RuntimeError(f"workers not serving; see {opts.log_dir}")
                time.sleep(0.1)
            settings = Settings(
                redis_url=server.url,
                database_url=url,
                data_dir=data_dir,
                job_retention_seconds=retention,
                idempotency_window_seconds=retention,
            )
            app = build(settings)
            engine, factory = e2e_db.open_database(url)
            try:
                rows, verdict = _soak(opts, app, factory, procs, server)
            finally:
                app.close()
                engine.dispose()
            summary = _summary(opts, rows, verdict, environment(server))
    finally:
        for proc in procs.values():
            stop_process(proc)
        template.close()
    return [*rows, summary], verdict


def _soak(
    opts: SoakOptions, app: Any, factory: Any, procs: dict[str, Any], server: RedisServer
) -> tuple[list[dict[str, Any]], Verdict]:
    """Measure the drain rate, then place at the soak's rate and sample."""
    first = min(place_paced(app, opts.probe).order_ids)
    started = time.perf_counter()
    wait_finished(factory, first, opts.probe, 600.0)
    drain_rate = opts.probe / (time.perf_counter() - started)
    rate = opts.rate or opts.load_fraction * drain_rate
    log.info(
        "drain rate %.0f orders/s; soaking at %.0f orders/s for %.1f min",
        drain_rate,
        rate,
        opts.minutes,
    )
    soak_first: int | None = None
    samples: list[Sample] = []
    rows: list[dict[str, Any]] = []
    placed = 0
    clock = time.perf_counter()
    total = opts.minutes * 60
    while True:
        elapsed = time.perf_counter() - clock
        finished = e2e_db.finished_orders(factory, soak_first) if soak_first else 0
        sample, row = take_sample(elapsed, procs, server, placed, finished)
        samples.append(sample)
        rows.append({**row, "drain_rate": round(drain_rate, 1), "rate": round(rate, 1)})
        log.info(
            "%5.0f s: %d placed, backlog %d; RSS %s MB; Redis %.1f MB",
            elapsed,
            placed,
            placed - finished,
            "/".join(f"{v[0]:.0f}" for v in sample.workers.values()),
            sample.redis_used_mb,
        )
        if elapsed >= total or len(sample.workers) < len(procs):
            break
        chunk = min(opts.interval_seconds(), total - elapsed)
        ids = place_paced(app, max(1, round(rate * chunk)), rate=rate).order_ids
        soak_first = min(ids) if soak_first is None else soak_first
        placed += len(ids)
    return rows, judge(samples, opts.steady_from())


def _summary(
    opts: SoakOptions, rows: list[dict[str, Any]], verdict: Verdict, env: dict[str, Any]
) -> dict[str, Any]:
    return {
        "kind": "soak",
        "library": "orderflow",
        "variant": opts.database,
        "database": opts.database,
        "minutes": opts.minutes,
        "interval_seconds": opts.interval_seconds(),
        "drain_rate": rows[0]["drain_rate"],
        "rate": rows[0]["rate"],
        # what placing kept up with on the machine: placed / seconds of the paced run
        "achieved_rate": round(rows[-1]["placed"] / max(rows[-1]["elapsed_seconds"], 1e-9), 1),
        "load_fraction": None if opts.rate else opts.load_fraction,
        "retention_seconds": opts.retention_seconds(),
        "steady_from_seconds": opts.steady_from(),
        "samples": len(rows),
        "placed": rows[-1]["placed"],
        "finished": rows[-1]["finished"],
        "max_backlog": max(r["backlog"] for r in rows),
        "within_bounds": verdict.within,
        "verdict": verdict.lines,
        "bounds": {
            "rss_growth": RSS_GROWTH,
            "rss_slack_mb": RSS_SLACK_MB,
            "fd_growth": FD_GROWTH,
            "redis_growth": REDIS_GROWTH,
            "redis_slack_mb": REDIS_SLACK_MB,
        },
        "loadavg_1m_before": rows[0]["loadavg_1m"],
        "loadavg_1m_after": rows[-1]["loadavg_1m"],
        "worker": f"{len(STEPS)} x `orders worker STEP` (CLI defaults)",
        "tpch_scale": opts.scale,
        **env,
    }
