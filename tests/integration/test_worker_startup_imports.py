"""A worker process starts without the web stack, the tracing SDK, Rich or Alembic, and
without the modules of options it was not given (process isolation, the /metrics server).

Start-up CPU is mostly imports (docs/performance.md, "Worker start-up"). The worker
runs the real ``orders`` console-script function up to its first fetch from Redis,
then reports which modules it holds and exits; the modules a worker needs must be
there too, so an import that failed early cannot pass for a lean one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

#: What a worker must not import unless asked (``orders web``, ``ORDERS_TRACES``, a
#: terminal message, a database behind the newest migration).
NOT_IMPORTED = ("fastapi", "starlette", "uvicorn", "orders.web", "opentelemetry.sdk", "locust")
NOT_IMPORTED_WHEN_QUIET = ("rich", "alembic")
#: Imported on first use: process isolation (``--isolation process``), the /metrics
#: server and its collectors (``--metrics-port``), the queue's inspection reads, attempt
#: spans (``ORDERS_TRACES``), and the click package (typer carries its own copy).
ON_FIRST_USE = (
    "reliable_queue.isolation",
    "multiprocessing",
    "orders.observability.registry",
    "orders.observability.readiness",
    "reliable_queue.inspection",
    "reliable_queue.attempt_tracing",
    "click",
)
#: What it cannot serve without.
IMPORTED = ("orders.worker.runner", "orders.domain.handlers", "sqlalchemy.orm", "redis")
#: Another database's: not on SQLite.
POSTGRESQL_ONLY = ("sqlalchemy.dialects.postgresql", "psycopg")

PROBE = """
import importlib.machinery, json, os, sys
WATCHED = json.loads(sys.argv.pop(1))
def first_round_trip(self, *args, **kwargs):
    loaded = {name: name in sys.modules for name in WATCHED}
    os.write(int(os.environ["PROBE_FD"]), (json.dumps(loaded) + "\\n").encode())
    os._exit(0)
class Hook:
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
from orders.cli.main import main
main()
"""


def _modules_at_first_fetch(env: dict[str, str], args: list[str]) -> dict[str, bool]:
    watched = [*NOT_IMPORTED, *NOT_IMPORTED_WHEN_QUIET, *ON_FIRST_USE, *IMPORTED, *POSTGRESQL_ONLY]
    read, write = os.pipe()
    try:
        proc = subprocess.run(
            [sys.executable, "-c", PROBE, json.dumps(watched), "worker", *args],
            env={**env, "PROBE_FD": str(write)},
            pass_fds=(write,),
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    with os.fdopen(read) as reader:
        report = reader.read()
    assert report, f"no fetch reached (exit {proc.returncode}): {proc.stderr.decode()[-2000:]}"
    return json.loads(report.splitlines()[0])  # two lanes may both have written


def _migrated(cli_env: dict[str, str], redis_url: str, key_prefix: str) -> dict[str, str]:
    """The CLI's environment on the test's Redis, its database at the newest migration."""
    env = {k: v for k, v in cli_env.items() if not k.startswith("OTEL_")}
    env.setdefault("ORDERS_REDIS_URL", redis_url)
    env.setdefault("ORDERS_QUEUE_PREFIX", key_prefix)
    upgrade = subprocess.run(
        [sys.executable, "-m", "orders.cli.main", "db", "upgrade"],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert upgrade.returncode == 0, upgrade.stderr.decode()
    return env


@pytest.mark.parametrize("args", [["--all"], ["stock"]], ids=["all", "one-step"])
def test_a_worker_reaches_its_first_fetch_without_web_tracing_sdk_rich_or_alembic(
    cli_env: dict[str, str], redis_url: str, key_prefix: str, args: list[str]
) -> None:
    env = _migrated(cli_env, redis_url, key_prefix)
    loaded = _modules_at_first_fetch(env, args)
    assert [m for m in IMPORTED if not loaded[m]] == []
    assert [m for m in (*NOT_IMPORTED, *NOT_IMPORTED_WHEN_QUIET) if loaded[m]] == []
    assert [m for m in ON_FIRST_USE if loaded[m]] == []
    if not env.get("ORDERS_DATABASE_URL", "sqlite").startswith("postgres"):
        assert [m for m in POSTGRESQL_ONLY if loaded[m]] == []


@pytest.mark.parametrize(
    ("args", "needed"),
    [
        (["stock", "--isolation", "process"], ("reliable_queue.isolation",)),
        (
            ["stock", "--metrics-port", "0"],
            ("orders.observability.registry", "orders.observability.readiness"),
        ),
    ],
    ids=["isolation", "metrics-port"],
)
def test_a_worker_given_an_option_imports_what_serves_it(
    cli_env: dict[str, str], redis_url: str, key_prefix: str, args: list[str], needed: tuple
) -> None:
    loaded = _modules_at_first_fetch(_migrated(cli_env, redis_url, key_prefix), args)
    assert [m for m in needed if not loaded[m]] == []
    assert loaded["orders.worker.runner"] and not loaded["orders.web"]


def test_with_traces_on_the_worker_does_import_the_tracing_sdk(
    cli_env: dict[str, str], redis_url: str, key_prefix: str
) -> None:
    env = dict(_migrated(cli_env, redis_url, key_prefix), ORDERS_TRACES="local")
    loaded = _modules_at_first_fetch(env, ["stock"])
    assert loaded["opentelemetry.sdk"] and loaded["orders.worker.runner"]
    assert loaded["reliable_queue.attempt_tracing"]
    assert not loaded["fastapi"] and not loaded["orders.web"]
