"""CPU seconds a worker process spends from its start to its first fetch.

``python -m benchmarks orderflow startup-cpu [--runs 5] [--steps all|STEP]
[--database-url URL] [--against CHECKOUT] [--from-source]`` starts ``orders worker
--all`` (or one step's worker) through the console script's function, again and
again, each time in a fresh process. A probe wraps the lane's first round trip to
Redis: there it reads the process's own CPU time (user + system,
``resource.getrusage``; not wall time, which a shared machine blurs) and ends the
process. Interpreter start, imports, settings, the schema check, Redis scripts,
threads: everything before the first fetch is counted.

Settings are the CLI defaults (an embedded Redis and a SQLite file in a throwaway
data dir; or ``--database-url`` for PostgreSQL, migrated first). A warm-up start,
not counted, starts the embedded Redis and migrates. With ``--against`` another
checkout (its own ``.venv``) takes turns with this one, run by run, so both see the
same machine; each row is the median of the runs with its min and max, and the load
average. Bytecode is used as a user's second start finds it (write it first:
``.ci/run`` does, with ``compileall``); ``--from-source`` compiles every import from
source instead.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: Run in the measured process: wrap the lane's round trip, print CPU and module
#: counts at the first one, exit at once (no shutdown work is counted).
PROBE = """
import importlib.machinery, os, resource, sys
def first_round_trip(self, *args, **kwargs):
    r = resource.getrusage(resource.RUSAGE_SELF)
    heavy = [m for m in ("fastapi", "orders.web", "opentelemetry.sdk", "uvicorn", "alembic",
                         "rich", "locust") if m in sys.modules]
    line = f"{r.ru_utime + r.ru_stime:.4f} {len(sys.modules)} {','.join(heavy)}\\n"
    os.write(int(os.environ["STARTUP_PROBE_FD"]), line.encode())
    os._exit(0)
class Hook:  # wraps the lane's round trip when the worker module is imported, not before
    def find_spec(self, name, path, target=None):
        if name != "reliable_queue.worker":
            return None
        sys.meta_path.remove(self)
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        execute = spec.loader.exec_module
        def exec_module(module):
            execute(module)
            module.Worker._lane_round_trip = first_round_trip
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, Hook())
sys.argv[0] = "orders"
import orders.cli.main as cli
getattr(cli, "main", cli.app)()  # the console script's function (older checkouts: app)
"""


def start_once(checkout: Path, args: list[str], env: dict[str, str]) -> tuple[float, int, str]:
    """Start one worker in ``checkout``; return (CPU seconds, modules, heavy ones loaded).

    Raises:
        RuntimeError: the process ended without reaching a fetch (its stderr says why).
    """
    python = checkout / ".venv" / "bin" / "python"
    read, write = os.pipe()
    try:
        proc = subprocess.run(
            [str(python), "-c", PROBE, "worker", *args],
            cwd=checkout,
            pass_fds=(write,),
            env={**env, "STARTUP_PROBE_FD": str(write)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    with os.fdopen(read) as reader:
        line = (reader.read().splitlines() or [""])[0]  # lanes fetching at once: the first
    if not line:
        tail = proc.stderr.decode(errors="replace")[-2000:]
        raise RuntimeError(f"{checkout}: no fetch reached (exit {proc.returncode}): {tail}")
    cpu, modules, heavy = (line.split(" ") + [""])[:3]
    return float(cpu), int(modules), heavy


def environment(data_dir: str, database_url: str | None) -> dict[str, str]:
    """The worker's environment: the caller's, minus ORDERS_* and OTEL_*, in ``data_dir``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORDERS_", "OTEL_"))}
    env["ORDERS_DATA_DIR"] = data_dir
    env.pop("PYTHONPATH", None)
    if database_url:
        env["ORDERS_DATABASE_URL"] = database_url
    return env


def summary(values: list[float]) -> str:
    """``median (min-max)`` of ``values``, seconds."""
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"


def run(
    runs: int = 5,
    steps: str = "all",
    database_url: str | None = None,
    against: list[Path] | None = None,
    no_bytecode: bool = False,
) -> list[str]:
    """Start the worker ``runs`` times per checkout, taking turns; return the report lines.

    Args:
        runs: counted starts per checkout (after one warm-up start each).
        steps: ``all`` (``orders worker --all``) or one step name.
        database_url: a PostgreSQL URL (migrated first); None: SQLite in the data dir.
        against: other checkouts (each with its ``.venv``) to take turns with.
        no_bytecode: compile every import from source (an empty bytecode cache).

    Raises:
        RuntimeError: a worker ended without reaching its first fetch.
    """
    args = ["--all"] if steps == "all" else [steps]
    checkouts = [REPO, *[p.resolve() for p in against or []]]
    cpu: dict[Path, list[float]] = {c: [] for c in checkouts}
    load: list[float] = []
    notes: dict[Path, tuple[int, str]] = {}
    with tempfile.TemporaryDirectory(prefix="startup-cpu-") as tmp:
        env = environment(tmp, database_url)
        if no_bytecode:  # an empty cache that stays empty: every module compiled
            env.update(PYTHONPYCACHEPREFIX=f"{tmp}/no-bytecode", PYTHONDONTWRITEBYTECODE="1")
        try:
            if database_url:
                subprocess.run(
                    [str(REPO / ".venv/bin/python"), "-m", "orders.cli.main", "db", "upgrade"],
                    cwd=REPO,
                    env=env,
                    check=True,
                    capture_output=True,
                )
            for checkout in checkouts:  # warm-up: embedded Redis up, SQLite migrated
                start_once(checkout, args, env)
            for i in range(runs):
                load.append(os.getloadavg()[0])
                order = checkouts if i % 2 == 0 else checkouts[::-1]
                for checkout in order:
                    seconds, modules, heavy = start_once(checkout, args, env)
                    cpu[checkout].append(seconds)
                    notes[checkout] = (modules, heavy)
            load.append(os.getloadavg()[0])
        finally:
            subprocess.run(
                [str(REPO / ".venv/bin/python"), "-m", "orders.cli.main", "services", "stop"],
                cwd=REPO,
                env=env,
                capture_output=True,
                check=False,
            )
    lines = [
        f"orders worker {' '.join(args)} on {'PostgreSQL' if database_url else 'SQLite'}"
        f"{', no bytecode' if no_bytecode else ', bytecode present'}: CPU seconds to the "
        f"first fetch, median (min-max) of {runs}; load average (1 min) "
        f"{min(load):.2f}-{max(load):.2f}"
    ]
    for checkout in checkouts:
        modules, heavy = notes[checkout]
        lines.append(
            f"  {str(checkout):32} {summary(cpu[checkout])}  modules {modules}"
            f"  heavy: {heavy or 'none'}"
        )
    return lines


def main() -> None:
    """Parse options, take turns between the checkouts, print one row per checkout."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--steps", default="all", help="all, or one step name")
    parser.add_argument("--database-url", default=None, help="default: SQLite in the data dir")
    parser.add_argument("--against", type=Path, action="append", default=[])
    parser.add_argument("--from-source", action="store_true")
    opts = parser.parse_args()
    for line in run(opts.runs, opts.steps, opts.database_url, opts.against, opts.from_source):
        print(line)


if __name__ == "__main__":
    main()
