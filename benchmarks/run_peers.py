"""The side-by-side run: every library enqueues and drains the same no-op jobs."""

from __future__ import annotations

import logging
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from .measure import percentile, start_process, stop_process, time_drain, timed
from .peers.base import LATENCY_KEY, URL_ENV, Peer
from .registry import load
from .server import RedisServer

log = logging.getLogger("benchmarks")
REPO = str(Path(__file__).resolve().parent.parent)


@dataclass(frozen=True)
class PeerOptions:
    """Knobs of the side-by-side run.

    Attributes:
        libraries: names to run (orderflow first).
        n: no-op jobs per drain.
        drain_timeout: bound on one drain, seconds (a slower library is cut short
            and its rate is taken over the jobs it finished).
        latency_rate: offered load of the latency run, jobs/s.
        latency_seconds: length of the latency run, seconds.
        latency_peers: fastest peers (by drain rate) that also get the latency run.
        log_dir: where worker logs go.
        repeat: runs per variant; the best enqueue and the best drain are kept.
    """

    libraries: tuple[str, ...]
    n: int = 20_000
    drain_timeout: float = 60.0
    latency_rate: float = 1000.0
    latency_seconds: float = 20.0
    latency_peers: int = 2
    log_dir: Path = Path("/tmp/bench-logs")
    repeat: int = 1


def environment(server: RedisServer) -> dict[str, Any]:
    """Fields stamped on every row: machine and server versions."""
    return {
        "redis": server.version(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def worker_env(server: RedisServer) -> dict[str, str]:
    """Environment for worker processes: the server URL and the repo on the path."""
    path = os.environ.get("PYTHONPATH", "")
    return {URL_ENV: server.url, "PYTHONPATH": REPO + (os.pathsep + path if path else "")}


def drain_once(
    server: RedisServer,
    peer: Peer,
    bulk: bool,
    tuned: bool,
    opts: PeerOptions,
    client: redis.Redis,
) -> dict[str, Any]:
    """Flush, enqueue ``n`` jobs with a fresh producer, then time one worker draining them."""
    argv, described = peer.worker(tuned)
    opts.log_dir.mkdir(parents=True, exist_ok=True)
    logfile = opts.log_dir / f"{peer.name}-{'tuned' if tuned else 'default'}.log"
    load_before = os.getloadavg()[0]
    seconds, drain, queued = float("inf"), None, 0
    for _ in range(opts.repeat):  # best of `repeat`: other load on the machine only slows
        server.flush()
        producer = peer.producer(server.url)
        try:
            enqueue = producer.enqueue_bulk if bulk else producer.enqueue
            seconds = min(seconds, timed(lambda: enqueue(opts.n)))  # noqa: B023
        finally:
            producer.close()
        queued = peer.remaining(client)
        proc = start_process(argv, worker_env(server), logfile)
        try:
            one = time_drain(
                lambda: peer.remaining(client),
                queued,
                timeout=opts.drain_timeout,
                alive=lambda: proc.poll() is None,  # noqa: B023
            )
        finally:
            stop_process(proc)
        if drain is None or one.rate > drain.rate:
            drain = one
    assert drain is not None
    return {
        "repeat": opts.repeat,
        "loadavg_1m_before": round(load_before, 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
        "enqueue_rate": round(opts.n / seconds, 1),
        "enqueue_seconds": round(seconds, 3),
        "queued_seen": queued,
        "drain_rate": round(drain.rate, 1),
        "drained": drain.jobs,
        "drain_seconds": round(drain.seconds, 3),
        "drain_complete": drain.complete,
        "worker_startup_seconds": round(drain.startup_seconds, 2),
        "worker": described,
        "worker_argv": " ".join(a.replace(REPO + "/", "") for a in argv[1:]),
    }


def run_library(
    server: RedisServer, peer: Peer, opts: PeerOptions, env: dict[str, Any]
) -> list[dict[str, Any]]:
    """Two rows: default worker after single-call enqueue; tuned worker after bulk enqueue
    (or single-call again when the library has no bulk API)."""
    client = server.client()
    rows = []
    try:
        variants = [("default", False, False), ("tuned-2core", True, bool(peer.bulk))]
        for variant, tuned, bulk in variants:
            api = "bulk" if bulk else "single"
            log.info("%s %s: enqueue %d (%s) and drain", peer.name, variant, opts.n, api)
            result = drain_once(server, peer, bulk, tuned, opts, client)
            rows.append(
                {
                    "kind": "throughput",
                    "library": peer.name,
                    "version": peer.version(),
                    "variant": variant,
                    "mode": peer.mode,
                    "guarantee": peer.guarantee,
                    "n": opts.n,
                    "enqueue_api": peer.bulk if bulk else "single call per job",
                    **result,
                    **env,
                }
            )
            log.info(
                "  -> enqueue %.0f jobs/s, drain %.0f jobs/s",
                result["enqueue_rate"],
                result["drain_rate"],
            )
    finally:
        client.close()
    return rows


def run_latency(
    server: RedisServer, peer: Peer, opts: PeerOptions, env: dict[str, Any]
) -> dict[str, Any]:
    """Enqueue-to-start percentiles at a fixed offered load, default worker settings.

    With ``repeat`` above 1 the run with the lowest p99 is kept (other load on the
    machine only adds delay); every run's p99 is listed in ``p99_ms_runs``.
    """
    runs = [latency_once(server, peer, opts, env) for _ in range(opts.repeat)]
    best = min(runs, key=lambda r: r["p99_ms"])
    return {**best, "repeat": opts.repeat, "p99_ms_runs": [r["p99_ms"] for r in runs]}


def latency_once(
    server: RedisServer, peer: Peer, opts: PeerOptions, env: dict[str, Any]
) -> dict[str, Any]:
    """One latency run (see :func:`run_latency`)."""
    load_before = os.getloadavg()[0]
    server.flush()
    client = server.client()
    producer = peer.producer(server.url)
    argv, described = peer.worker(False)
    proc = start_process(argv, worker_env(server), opts.log_dir / f"{peer.name}-latency.log")
    try:
        # warm-up: the worker is up and has run a few jobs before the clock starts
        producer.paced(50.0, 0.2)
        deadline = time.monotonic() + 60
        while client.llen(LATENCY_KEY) < 10 and time.monotonic() < deadline:
            time.sleep(0.05)
        client.delete(LATENCY_KEY)
        started = time.perf_counter()
        sent = producer.paced(opts.latency_rate, opts.latency_seconds)
        send_seconds = time.perf_counter() - started
        deadline = time.monotonic() + 30
        while client.llen(LATENCY_KEY) < sent and time.monotonic() < deadline:
            time.sleep(0.05)
        values = sorted(float(x) for x in client.lrange(LATENCY_KEY, 0, -1))
    finally:
        stop_process(proc)
        producer.close()
        client.close()
    return {
        "kind": "latency",
        "library": peer.name,
        "version": peer.version(),
        "variant": "default",
        "mode": peer.mode,
        "guarantee": peer.guarantee,
        "n": sent,
        "enqueue_rate": None,
        "drain_rate": None,
        "offered_rate": opts.latency_rate,
        "achieved_offered_rate": round(sent / send_seconds, 1),
        "seconds": opts.latency_seconds,
        "started": len(values),
        "p50_ms": round(percentile(values, 50), 3),
        "p95_ms": round(percentile(values, 95), 3),
        "p99_ms": round(percentile(values, 99), 3),
        "max_ms": round(values[-1], 3) if values else None,
        "worker": described,
        "loadavg_1m_before": round(load_before, 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
        **env,
    }


def run_peers(opts: PeerOptions) -> list[dict[str, Any]]:
    """The whole side-by-side run on one fresh Redis server; returns the rows."""
    rows: list[dict[str, Any]] = []
    for noisy in ("rq", "rq.queue", "rq.worker", "celery", "taskiq", "arq", "saq", "huey"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    with RedisServer() as server:
        os.environ[URL_ENV] = server.url
        env = environment(server)
        peers = [load(name) for name in opts.libraries]
        for peer in peers:
            rows += run_library(server, peer, opts, env)
        best: dict[str, float] = {}
        for row in rows:
            best[row["library"]] = max(best.get(row["library"], 0.0), row["drain_rate"])
        fastest = sorted((n for n in best if n != "orderflow"), key=lambda n: -best[n])
        chosen = [p for p in peers if p.name == "orderflow"]
        chosen += [p for name in fastest[: opts.latency_peers] for p in peers if p.name == name]
        if opts.latency_seconds > 0:
            for peer in chosen:
                log.info(
                    "%s: latency at %.0f jobs/s for %.0f s",
                    peer.name,
                    opts.latency_rate,
                    opts.latency_seconds,
                )
                rows.append(run_latency(server, peer, opts, env))
    return rows
