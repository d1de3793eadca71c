"""The data dir is its owner's alone: 0700 directories and 0600 files for everything the
``orders`` processes create (database, AOF, Redis log, metrics), checked as ``nobody``."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_processes import orders_command, run_orders, start_orders, stop
from unprivileged import as_nobody, require_setpriv, world_traversable_dir

from reliable_queue.embedded import EmbeddedRedis

# What this checks does not depend on the database: the PostgreSQL pass skips it.
pytestmark = pytest.mark.no_database


@pytest.fixture
def open_data_dir() -> Iterator[Path]:
    """A data dir path inside a directory every user may enter (not created yet)."""
    parent = world_traversable_dir()
    data = parent / "data"
    yield data
    EmbeddedRedis(data).stop(timeout=10.0)
    shutil.rmtree(parent, ignore_errors=True)


def embedded_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORDERS_")}
    env["ORDERS_DATA_DIR"] = str(data_dir)
    return env


@pytest.mark.slow
def test_everything_the_processes_create_is_private(open_data_dir: Path) -> None:
    env = embedded_env(open_data_dir)
    run_orders(["load-tpch", "--scale", "0.001"], env)
    run_orders(["place", "-n", "3", "--source", "random"], env)
    worker = start_orders(["worker", "--all"], env, open_data_dir.parent / "worker.log")
    try:
        deadline = time.monotonic() + 30
        while not list((open_data_dir / "metrics").rglob("*.db")):
            assert time.monotonic() < deadline, (open_data_dir.parent / "worker.log").read_text()
            time.sleep(0.2)
    finally:
        stop(worker)
    created = list(open_data_dir.rglob("*"))
    names = {p.name for p in created}
    assert {"orders.db", "redis.log", "redis.pid"} <= names, names
    assert any("appendonly" in n for n in names) and any(n.endswith(".db") for n in names)
    assert stat.S_IMODE(open_data_dir.stat().st_mode) == 0o700
    for path in created:
        if path.is_socket():
            continue
        assert stat.S_IMODE(path.lstat().st_mode) & 0o077 == 0, (path, oct(path.stat().st_mode))
    assert not (open_data_dir / "redis" / "redis.port").exists()  # no TCP listener

    require_setpriv()
    for path in (open_data_dir / "orders.db", open_data_dir / "redis" / "redis.log"):
        denied = as_nobody(["cat", str(path)])
        assert denied.returncode != 0 and "Permission denied" in denied.stderr
    assert as_nobody(["ls", str(open_data_dir)]).returncode != 0


def test_a_data_dir_open_to_others_is_warned_about(open_data_dir: Path) -> None:
    open_data_dir.mkdir(mode=0o755)
    open_data_dir.chmod(0o755)
    proc = subprocess.run(
        [*orders_command(), "services", "start"],
        env=embedded_env(open_data_dir),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "open to other users (mode 755)" in proc.stderr and "chmod 700" in proc.stderr
