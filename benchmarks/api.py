"""Orders/s and latency through the HTTP API, with retried requests, beside ``orders place``.

One run per database: a fresh database with TPC-H (scale 0.01) loaded, its own Redis
(AOF everysec), one worker process per step, and ``orders web`` serving the API.
A load generator offers each rate for a fixed time; 10% of the orders are first sent
on a connection the client abandons after 2 ms, then sent again with the same key.
With ``--client wrk`` (the default) wrk sends 90% of the orders once each
(``benchmarks/api_wrk.lua``; the latency figures are its own, of those first sends)
and threads of this process send the retried 10% (``benchmarks/api_retrier.py``);
with ``--client locust`` locust sends both (``benchmarks/api_locustfile.py``).
Between two rates, ``orders place --source random`` places the same number of orders
through the CLI (interleaved, same machine, same run).
"""

from __future__ import annotations

import csv
import json
import logging
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from orders.app.bootstrap import build
from orders.app.settings import Settings
from orders.app.tokens import create_token
from orders.domain.access import ApiOrder
from orders.domain.steps import STEPS
from orders.sources.tpch import load_tpch
from workflows.uow import UnitOfWork

from .api_retrier import Retried, run_retried
from .e2e import drop_pg_database, fresh_pg_database, wait_until_serving
from .measure import (
    command_cpu_seconds,
    machine_cpu_seconds,
    process_cpu_seconds,
    start_process,
    stop_process,
)
from .run_peers import REPO, environment
from .server import RedisServer, free_port

log = logging.getLogger("benchmarks")
HERE = Path(__file__).resolve().parent
USER_RATE = 5.0
"""Orders per second each simulated shop places (users = rate / USER_RATE)."""
RETRIED_SHARE = 0.1
"""Share of the offered orders first sent on a connection abandoned after 2 ms."""
CLIENTS = ("wrk", "locust")
WRK_THREADS = 2
"""wrk's threads; each sends on its own schedule of ``rate / WRK_THREADS`` orders/s."""


def _wait_http(url: str, timeout: float = 60.0) -> None:
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:  # noqa: S310 - loopback
                if reply.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer within {timeout:.0f} s")


def _api_orders(app: Any) -> int:
    with app.session_factory() as session:
        return int(session.scalar(select(func.count()).select_from(ApiOrder)) or 0)


def _locust(port: int, token: str, rate: float, seconds: float, out: Path) -> dict[str, Any]:
    """Offer ``rate`` orders/s for ``seconds``; return locust's figures and the client's."""
    users = max(1, round(rate / USER_RATE))
    env = {
        "BENCH_TOKEN": token,
        "BENCH_USER_RATE": str(rate / users),
        "BENCH_OUT": str(out / f"client-{rate:g}.json"),
        "PYTHONPATH": REPO,
    }
    prefix = out / f"locust-{rate:g}"
    proc = start_process(
        [
            "python",
            "-m",
            "locust",
            "-f",
            str(HERE / "api_locustfile.py"),
            "--headless",
            "-u",
            str(users),
            "-r",
            str(users),
            "-t",
            f"{seconds:g}s",
            "--host",
            f"http://127.0.0.1:{port}",
            "--csv",
            str(prefix),
            "--only-summary",
            "--stop-timeout",
            "10",
            "--exit-code-on-error",
            "0",
        ],
        env,
        out / f"locust-{rate:g}.log",
    )
    proc.wait(timeout=seconds + 120)
    with open(f"{prefix}_stats.csv") as f:
        stats = next(r for r in csv.DictReader(f) if r["Name"] == "POST /api/v1/orders")
    client = json.loads((out / f"client-{rate:g}.json").read_text())
    return {"users": users, "stats": stats, "client": client}


def _wrk(port: int, token: str, rate: float, seconds: float, out: Path) -> dict[str, Any]:
    """Offer ``rate`` orders/s for ``seconds``: wrk sends ``1 - RETRIED_SHARE`` of them once
    each, threads of this process the rest (abandoned once, then retried).

    Returns:
        ``users`` (connections plus shops), ``stats`` (locust's CSV field names: request
        and failure counts and the 50/99/100 percentiles in ms of wrk's first sends) and
        ``client`` (``acknowledged``, ``conflicting``, ``abandoned``, ``gave_up``).

    Raises:
        RuntimeError: wrk is not installed, or printed no figures (its stderr).
    """
    wrk = shutil.which("wrk")
    if wrk is None:
        raise RuntimeError("wrk is not installed (Debian: apt-get install wrk); or --client locust")
    once = rate * (1 - RETRIED_SHARE)
    # one connection per 5 orders/s: free ones are there when replies slow down
    connections = max(WRK_THREADS, round(once / USER_RATE))
    retried_holder: list[Retried] = []
    retrier = threading.Thread(
        target=lambda: retried_holder.append(
            run_retried(port, token, rate * RETRIED_SHARE, seconds, per_shop=USER_RATE)
        ),
        name="retried-orders",
    )
    retrier.start()
    try:
        done = subprocess.run(
            [
                wrk,
                f"-t{WRK_THREADS}",
                f"-c{connections}",
                f"-d{seconds:g}s",
                "--timeout",
                "10s",
                "-s",
                str(HERE / "api_wrk.lua"),
                f"http://127.0.0.1:{port}",
            ],
            env={
                **os.environ,
                "BENCH_TOKEN": token,
                "BENCH_GAP_MS": str(1000 * WRK_THREADS / once),
            },
            capture_output=True,
            text=True,
            timeout=seconds + 60,
            check=False,
        )
    finally:
        retrier.join(timeout=seconds + 120)
    (out / f"wrk-{rate:g}.log").write_text(done.stdout + done.stderr)
    figures = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not figures or not retried_holder:
        raise RuntimeError(f"wrk failed ({done.returncode}): {done.stderr[-500:]}")
    sent, retried = json.loads(figures[-1]), retried_holder[0]
    to_201 = sorted(retried.seconds_to_201)
    return {
        "users": connections + max(1, round(rate * RETRIED_SHARE / USER_RATE)),
        "stats": {
            "Request Count": sent["requests"] + retried.requests,
            "Failure Count": sent["other"] + sent["transport_errors"] + retried.failures,
            "50%": sent["p50_ms"],
            "99%": sent["p99_ms"],
            "100%": sent["max_ms"],
        },
        "client": {
            "acknowledged": sent["created"] + len(retried.acknowledged),
            "conflicting": retried.conflicting,
            "abandoned": retried.abandoned,
            "gave_up": retried.gave_up,
            # wrk's orders whose reply never came (in flight when its time was up, or
            # lost to a transport error): placed or not, nobody knows
            "unanswered": sent["unanswered"],
            "retried_median_ms": round(1000 * statistics.median(to_201), 1) if to_201 else None,
        },
    }


def _cpu_now(web: int, workers: list[int], redis: int | None, database: str) -> dict[str, float]:
    """CPU seconds used so far by each part of a run (summed over its processes).

    ``load`` is this process (the retried share's threads) plus its waited-for
    children (wrk, once it has exited); ``machine`` is every core's busy time and
    ``wall`` the monotonic clock, both in seconds. Parts that cannot be read count 0.
    """
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "web": process_cpu_seconds(web) or 0.0,
        "workers": sum(process_cpu_seconds(pid) or 0.0 for pid in workers),
        "redis": (process_cpu_seconds(redis) or 0.0) if redis else 0.0,
        "database": (command_cpu_seconds("postgres") or 0.0) if database == "postgresql" else 0.0,
        "load": own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime,
        "machine": machine_cpu_seconds() or 0.0,
        "wall": time.monotonic(),
    }


def cpu_split(before: dict[str, float], after: dict[str, float], orders: int) -> dict[str, Any]:
    """Where a run's CPU went: milliseconds per order created of each part, and the
    share of the machine's cores that were busy (0..1).

    Args:
        before / after: :func:`_cpu_now` at the run's start and end.
        orders: orders created in the run (0: the per-order figures are None).

    Returns:
        ``<part>_cpu_ms_per_order`` for each part (ms, or None) and
        ``machine_busy_share``; the database part is the PostgreSQL server's
        processes (0 on SQLite, whose work is in the processes that use it).
    """
    spent = {k: max(0.0, after[k] - before[k]) for k in before}
    cores = os.cpu_count() or 1
    parts = ("web", "workers", "redis", "database", "load", "machine")
    return {
        **{
            f"{k}_cpu_ms_per_order": round(1000 * spent[k] / orders, 2) if orders else None
            for k in parts
        },
        "machine_busy_share": round(spent["machine"] / (spent["wall"] * cores), 2)
        if spent["wall"] > 0
        else None,
    }


def _place_cli(env: dict[str, str], count: int, log_file: Path) -> float:
    """Seconds ``orders place --count N --source random`` takes (placement only)."""
    started = time.perf_counter()
    proc = start_process(
        ["python", "-m", "orders.cli.main", "place", "--count", str(count), "--source", "random"],
        env,
        log_file,
    )
    if proc.wait(timeout=600) != 0:
        raise RuntimeError(f"orders place failed: see {log_file}")
    return time.perf_counter() - started


def run_api(
    database: str,
    rates: list[float],
    seconds: float,
    *,
    workers: bool = True,
    client: str = "wrk",
) -> list[dict[str, Any]]:
    """One database's rows: for each offered rate, what the API accepted, its latency and
    the duplicates, and ``orders place`` placing as many orders through the CLI.

    Args:
        database: ``sqlite`` or ``postgresql``.
        rates: offered orders per second, one run each, in order.
        seconds: length of one run, seconds.
        workers: run one worker process per step throughout (the issue's setting).
        client: ``wrk`` (wrk plus threads for the retried share) or ``locust``.

    Raises:
        ValueError: an unknown ``client``.
        RuntimeError: ``wrk`` is not installed or failed.
    """
    if client not in CLIENTS:
        raise ValueError(f"client must be one of {', '.join(CLIENTS)}, not {client!r}")
    offer = _wrk if client == "wrk" else _locust
    data_dir = Path(tempfile.mkdtemp(prefix="bench-api-"))
    url = fresh_pg_database() if database == "postgresql" else f"sqlite:///{data_dir}/orders.db"
    rows: list[dict[str, Any]] = []
    with RedisServer(appendfsync="everysec") as server:
        settings = Settings(redis_url=server.url, database_url=url, data_dir=data_dir)
        app = build(settings, auto_migrate=True)
        log.info("%s: loading TPC-H (scale 0.01)", database)
        load_tpch(app.session_factory, data_dir)
        with UnitOfWork(app.session_factory) as uow:
            token = create_token(uow.session, "bench-shop", "placer")
            uow.commit()
        env = {
            "ORDERS_REDIS_URL": server.url,
            "ORDERS_DATABASE_URL": url,
            "ORDERS_DATA_DIR": str(data_dir),
            "PYTHONPATH": REPO,
        }
        procs = []
        if workers:
            procs = [
                start_process(
                    ["python", "-m", "benchmarks.e2e_worker", step],
                    env,
                    data_dir / f"worker-{step}.log",
                )
                for step in STEPS
            ]
        port = free_port()
        web = start_process(
            [
                "python",
                "-m",
                "orders.cli.main",
                "web",
                "--port",
                str(port),
                "--log-level",
                "WARNING",
            ],
            {**env, "ORDERS_WEB_API_RATE_PER_SECOND": "1000000", "ORDERS_WEB_API_BURST": "1000000"},
            data_dir / "web.log",
        )
        try:
            _wait_http(f"http://127.0.0.1:{port}/healthz")
            if workers:
                wait_until_serving(server.client(), len(STEPS))
            for rate in rates:
                before = _api_orders(app)
                worker_pids = [p.pid for p in procs]
                redis_pid = server.proc.pid if server.proc else None
                cpu_before = _cpu_now(web.pid, worker_pids, redis_pid, database)
                log.info("%s: offering %g orders/s for %g s", database, rate, seconds)
                run = offer(port, token, rate, seconds, data_dir)
                cpu_after = _cpu_now(web.pid, worker_pids, redis_pid, database)
                created = _api_orders(app) - before
                split = cpu_split(cpu_before, cpu_after, created)
                stats, answers = run["stats"], run["client"]
                count = max(int(rate * seconds), 1)
                cli_seconds = _place_cli(env, count, data_dir / f"place-{rate:g}.log")
                rows.append(
                    {
                        "kind": "api",
                        "library": "orderflow",
                        "version": "app",
                        "variant": f"{database} {rate:g}/s offered",
                        "database": database,
                        "offered_rate": rate,
                        "seconds": seconds,
                        "users": run["users"],
                        "requests": int(stats["Request Count"]),
                        "failures": int(stats["Failure Count"]),
                        "accepted_orders": answers["acknowledged"],
                        "accepted_per_second": round(answers["acknowledged"] / seconds, 1),
                        "p50_ms": float(stats["50%"]),
                        "p99_ms": float(stats["99%"]),
                        "max_ms": float(stats["100%"]),
                        "retried_after_timeout": answers["abandoned"],
                        "retried_median_ms": answers.get("retried_median_ms"),
                        "unanswered": answers.get("unanswered", 0),
                        "client": client,
                        "orders_created": created,
                        # orders created beyond the keys acknowledged (0: no duplicate); the
                        # orders of unanswered requests may or may not have been placed
                        "duplicate_orders": max(
                            0,
                            created
                            - answers["acknowledged"]
                            - answers["gave_up"]
                            - answers.get("unanswered", 0),
                        ),
                        "keys_with_two_ids": len(answers["conflicting"]),
                        "keys_given_up": answers["gave_up"],
                        # every part's CPU per order (web, workers, redis, the PostgreSQL
                        # server, the load generator, the whole machine) and how busy the
                        # machine's cores were while the rate was offered
                        **split,
                        "cli_place_orders": count,
                        "cli_place_per_second": round(count / cli_seconds, 1),
                        "workers": len(procs),
                        # other work on the machine blurs every figure above: say how much
                        "load_average_1m": round(os.getloadavg()[0], 2),
                        **environment(server),
                    }
                )
                log.info("%s", rows[-1])
        finally:
            stop_process(web)
            for p in procs:
                stop_process(p)
            app.close()
    if database == "postgresql":
        drop_pg_database()
    return rows
