"""The side-by-side run: every library enqueues and drains the same no-op jobs."""

from __future__ import annotations

import logging
import os
import platform
import time
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis

from .cpu_hog import Hog, cpu_hog, share_of_a_core
from .harness import Turn, group_runs, summarize, take_turns
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
        repeat: rounds of turns (``benchmarks.harness.interleaved``): runs per variant,
            summarised as median, min and max.
        cpu_hog: run every latency run beside a second CPU-bound process
            (``benchmarks.cpu_hog``), started just before the run and killed after it.
    """

    libraries: tuple[str, ...]
    n: int = 20_000
    drain_timeout: float = 60.0
    latency_rate: float = 1000.0
    latency_seconds: float = 20.0
    latency_peers: int = 2
    log_dir: Path = Path("/tmp/bench-logs")
    repeat: int = 3
    cpu_hog: bool = False


#: Seconds a latency run may take besides its paced part: the warm-up's bound (60),
#: the wait for the last latencies (30) and some slack; a hog outlives none of them.
LATENCY_RUN_BOUND = 120.0


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
    """Flush, enqueue ``n`` jobs with a fresh producer, then time one worker draining them
    (one run; the load average read before and after it)."""
    argv, described = peer.worker(tuned)
    opts.log_dir.mkdir(parents=True, exist_ok=True)
    logfile = opts.log_dir / f"{peer.name}-{'tuned' if tuned else 'default'}.log"
    load_before = os.getloadavg()[0]
    server.flush()
    producer = peer.producer(server.url)
    try:
        enqueue = producer.enqueue_bulk if bulk else producer.enqueue
        seconds = timed(lambda: enqueue(opts.n))
    finally:
        producer.close()
    queued = peer.remaining(client)
    proc = start_process(argv, worker_env(server), logfile)
    try:
        drain = time_drain(
            lambda: peer.remaining(client),
            queued,
            timeout=opts.drain_timeout,
            alive=lambda: proc.poll() is None,
        )
    finally:
        stop_process(proc)
    return {
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


THROUGHPUT_FIELDS = (
    "enqueue_rate",
    "enqueue_seconds",
    "queued_seen",
    "drain_rate",
    "drained",
    "drain_seconds",
    "drain_complete",
    "worker_startup_seconds",
)
"""The measured figures of a throughput run (each summarised as median, min and max)."""

LATENCY_FIELDS = (
    "n",
    "achieved_offered_rate",
    "started",
    "p50_ms",
    "p95_ms",
    "p99_ms",
    "max_ms",
    "cpu_hog_cores",
)
"""The measured figures of a latency run."""


def library_turn(
    server: RedisServer, peer: Peer, opts: PeerOptions, env: dict[str, Any]
) -> list[dict[str, Any]]:
    """One library's turn: two runs, the default worker after single-call enqueue and the
    tuned worker after bulk enqueue (or single-call again when the library has no bulk API)."""
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


def summarize_turns(
    turns: list[Turn[Peer, list[dict[str, Any]]]], keys: list[str], fields: tuple[str, ...]
) -> list[dict[str, Any]]:
    """One row per ``keys`` group of the turns' rows: medians, min, max and every run."""
    runs = [turn.stamp(row) for turn in turns for row in turn.result]
    return [summarize(group, fields) for group in group_runs(runs, keys).values()]


def latency_once(
    server: RedisServer, peer: Peer, opts: PeerOptions, env: dict[str, Any]
) -> dict[str, Any]:
    """Enqueue-to-start percentiles (ms) of one run at a fixed offered load, default worker
    settings; the load average read before and after it.

    With ``opts.cpu_hog`` a busy loop runs in a second process from just before the
    worker starts until the run's last latency is read (killed then, or when the run
    fails); ``cpu_hog_cores`` is the CPU it used over the timed window, in cores.
    """
    load_before = os.getloadavg()[0]
    server.flush()
    client = server.client()
    producer = peer.producer(server.url)
    argv, described = peer.worker(False)
    hog: AbstractContextManager[Hog | None] = (
        cpu_hog(opts.latency_seconds + LATENCY_RUN_BOUND) if opts.cpu_hog else nullcontext()
    )
    try:
        with hog as running:
            proc = start_process(
                argv, worker_env(server), opts.log_dir / f"{peer.name}-latency.log"
            )
            try:
                # warm-up: the worker is up and has run a few jobs before the clock starts
                producer.paced(50.0, 0.2)
                deadline = time.monotonic() + 60
                while client.llen(LATENCY_KEY) < 10 and time.monotonic() < deadline:
                    time.sleep(0.05)
                client.delete(LATENCY_KEY)
                hog_before = running.cpu_seconds() if running else None
                started = time.perf_counter()
                sent = producer.paced(opts.latency_rate, opts.latency_seconds)
                send_seconds = time.perf_counter() - started
                deadline = time.monotonic() + 30
                while client.llen(LATENCY_KEY) < sent and time.monotonic() < deadline:
                    time.sleep(0.05)
                values = sorted(float(x) for x in client.lrange(LATENCY_KEY, 0, -1))
                window = time.perf_counter() - started
                hog_after = running.cpu_seconds() if running else None
            finally:
                stop_process(proc)
    finally:
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
        "cpu_hog": opts.cpu_hog,
        "cpu_hog_cores": share_of_a_core(hog_before, hog_after, window) if opts.cpu_hog else None,
        "worker": described,
        "loadavg_1m_before": round(load_before, 2),
        "loadavg_1m_after": round(os.getloadavg()[0], 2),
        **env,
    }


def run_peers(opts: PeerOptions) -> list[dict[str, Any]]:
    """The whole side-by-side run on one fresh Redis server; returns the rows.

    The libraries take turns (``benchmarks.harness``): ``repeat`` rounds, every other
    one in reverse order, each turn running both drain variants. Then orderflow and the
    ``latency_peers`` fastest peers (by median tuned drain) take turns at the latency
    run the same way. Each row is one variant of one library: medians with min, max
    and every run (``<field>_runs``), the load average of every run beside it.
    """
    for noisy in ("rq", "rq.queue", "rq.worker", "celery", "taskiq", "arq", "saq", "huey"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    with RedisServer() as server:
        os.environ[URL_ENV] = server.url
        env = environment(server)
        peers = [load(name) for name in opts.libraries]
        turns = take_turns(
            peers, opts.repeat, lambda peer, _: library_turn(server, peer, opts, env)
        )
        rows = summarize_turns(turns, ["library", "variant"], THROUGHPUT_FIELDS)
        if opts.latency_seconds <= 0:
            return rows
        best = {r["library"]: r["drain_rate"] for r in rows if r["variant"] == "tuned-2core"}
        fastest = sorted((n for n in best if n != "orderflow"), key=lambda n: -best[n])
        chosen = [p for p in peers if p.name == "orderflow"]
        chosen += [p for name in fastest[: opts.latency_peers] for p in peers if p.name == name]

        def latency_turn(peer: Peer, _: int) -> list[dict[str, Any]]:
            log.info(
                "%s: latency at %.0f jobs/s for %.0f s%s",
                peer.name,
                opts.latency_rate,
                opts.latency_seconds,
                " beside a CPU-bound process" if opts.cpu_hog else "",
            )
            return [latency_once(server, peer, opts, env)]

        latency = take_turns(chosen, opts.repeat, latency_turn)
        rows += summarize_turns(latency, ["library"], LATENCY_FIELDS)
    return rows
