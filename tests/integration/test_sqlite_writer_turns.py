"""SQLite writers take turns through a file lock (orders/app/sqlite_writers.py)."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import text

from orders.app.db import make_engine
from orders.app.sqlite_writers import WriterTurns, is_write
from orders.app.turn_holders import Holder, turn_margin

pytestmark = pytest.mark.no_database  # its own SQLite files, whatever the pass


def turn_is_free(lock_path: Path) -> bool:
    """Can another descriptor take the lock right now?"""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@pytest.fixture
def engine(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'orders.db'}")
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE t (x INTEGER)"))
    yield engine
    engine.dispose()


@pytest.mark.parametrize("end", ["commit", "rollback"])
def test_a_write_holds_the_turn_until_its_transaction_ends(engine, tmp_path, end):
    lock = tmp_path / "orders.db-writers"
    with engine.connect() as conn:
        conn.execute(text("SELECT count(*) FROM t"))
        assert turn_is_free(lock)  # a read takes no turn
        conn.execute(text("INSERT INTO t VALUES (1)"))
        assert not turn_is_free(lock)
        conn.execute(text("INSERT INTO t VALUES (2)"))  # the same turn, no second wait
        getattr(conn, end)()
        assert turn_is_free(lock)
    with engine.connect() as conn:
        expected = 2 if end == "commit" else 0
        assert conn.execute(text("SELECT count(*) FROM t")).scalar() == expected


def test_a_failed_write_gives_its_turn_back(engine, tmp_path):
    with engine.connect() as conn:
        conn.execute(text("INSERT INTO t VALUES (1)"))
        with pytest.raises(Exception, match="no such table"):
            conn.execute(text("INSERT INTO missing VALUES (1)"))
        conn.rollback()
    assert turn_is_free(tmp_path / "orders.db-writers")


@pytest.mark.parametrize("broken", ["directory", "symlink"])
def test_an_unusable_lock_file_never_fails_a_write(tmp_path, broken):
    """The lock file only orders writers: when it cannot be opened (a directory
    or a symbolic link where it should be), writes go on without turns."""
    lock = tmp_path / "orders.db-writers"
    if broken == "directory":
        lock.mkdir()
    else:
        (tmp_path / "elsewhere").write_text("")
        lock.symlink_to(tmp_path / "elsewhere")
    engine = make_engine(f"sqlite:///{tmp_path / 'orders.db'}")
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE t (x INTEGER)"))
            conn.execute(text("INSERT INTO t VALUES (1)"))
        with engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM t")).scalar() == 1
    finally:
        engine.dispose()


def test_a_thread_holding_a_turn_does_not_wait_for_itself(tmp_path):
    turns = WriterTurns(tmp_path / "lock", timeout=30.0)
    first, nested = object(), object()
    assert turns.acquire(first)
    started = time.monotonic()
    assert turns.acquire(nested) is False  # a nested unit of work: no wait on itself
    assert time.monotonic() - started < 1.0
    turns.release(first)
    assert turns.acquire(nested)
    turns.release(nested)


def test_a_wait_past_the_timeout_goes_on_without_a_turn(tmp_path):
    lock = tmp_path / "lock"
    holder = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)
    now = [0.0]
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    turns = WriterTurns(lock, timeout=0.01, clock=lambda: now[0], sleep=sleep)
    try:
        assert turns.acquire(object()) is False
        assert max(pauses) <= 0.001 and sum(pauses) >= 0.01
    finally:
        os.close(holder)


def test_a_killed_holder_leaves_no_turn_held(tmp_path):
    lock = tmp_path / "lock"
    code = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from orders.app.sqlite_writers import WriterTurns\n"
        "WriterTurns(Path(sys.argv[1]), 30.0).acquire(object())\n"
        "print('held', flush=True)\n"
        "time.sleep(60)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code, str(lock)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"held"
        assert not turn_is_free(lock)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        turns, connection = WriterTurns(lock, timeout=5.0), object()
        assert turns.acquire(connection)
        turns.release(connection)
    finally:
        proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


HOLDER = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from orders.app.sqlite_writers import WriterTurns\n"
    "lease = float(sys.argv[2]) if sys.argv[2] != '-' else None\n"
    "turns, conn = WriterTurns(Path(sys.argv[1]), 30.0, lease_seconds=lease), object()\n"
    "turns.acquire(conn)\n"
    "if sys.argv[3] == 'release':\n"
    "    turns.release(conn)\n"
    "print('held', flush=True)\n"
    "time.sleep(60)\n"
)


@contextmanager
def holder(lock: Path, lease: float | None, then: str = "keep"):
    """A child process that takes the turn (declaring ``lease``), then keeps or releases it."""
    args = [sys.executable, "-c", HOLDER, str(lock), "-" if lease is None else str(lease), then]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"held"
        yield proc
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


def test_a_frozen_holder_loses_its_turn_at_its_lease_plus_the_margin(tmp_path):
    lock = tmp_path / "lock"
    with holder(lock, lease=0.5) as proc:
        os.kill(proc.pid, signal.SIGSTOP)  # frozen with the turn: it can never give it back
        started = time.monotonic()
        turns, connection = WriterTurns(lock, timeout=10.0), object()
        assert turns.acquire(connection)
        waited = time.monotonic() - started
        turns.release(connection)
        assert proc.wait(timeout=10) == -signal.SIGKILL
    assert waited < 0.5 + turn_margin(0.5) + 0.5  # lease 0.5 s + margin 1 s, two looks


def test_a_holder_that_declares_no_lease_is_never_killed(tmp_path):
    lock = tmp_path / "lock"
    with holder(lock, lease=None) as proc:
        os.kill(proc.pid, signal.SIGSTOP)
        assert WriterTurns(lock, timeout=2.0).acquire(object()) is False
        assert proc.poll() is None


def test_a_record_left_by_a_holder_that_gave_its_turn_back_kills_nobody(tmp_path):
    """The record stays in the file after its holder released the turn; a waiter that
    finds it past its deadline checks who holds the lock now (``/proc/locks``)."""
    lock = tmp_path / "lock"
    with holder(lock, lease=0.1, then="release") as proc:
        other = os.open(lock, os.O_RDWR, 0o600)  # the turn's holder now writes no record
        fcntl.flock(other, fcntl.LOCK_EX)
        try:
            assert WriterTurns(lock, timeout=2.0).acquire(object()) is False
            assert proc.poll() is None
        finally:
            os.close(other)


def test_a_record_whose_process_start_time_differs_kills_nobody(tmp_path):
    """A pid in the record that now belongs to another process is not that holder."""
    lock = tmp_path / "lock"
    with holder(lock, lease=0.1) as proc:
        fd = os.open(lock, os.O_RDWR)
        try:
            mine = Holder.decode(os.pread(fd, 64, 0))
            assert mine is not None and mine.pid == proc.pid and mine.start > 0
            os.pwrite(fd, Holder(mine.pid, mine.start + 1, mine.deadline).encode(), 0)
        finally:
            os.close(fd)
        assert WriterTurns(lock, timeout=2.0).acquire(object()) is False
        assert proc.poll() is None


@pytest.mark.parametrize(
    ("statement", "writes"),
    [
        ("SELECT 1", False),
        ("  select * from t", False),
        ("PRAGMA foreign_keys = ON", False),
        ("EXPLAIN QUERY PLAN SELECT 1", False),
        ("INSERT INTO t VALUES (1)", True),
        ("UPDATE t SET x = 1", True),
        ("DELETE FROM t", True),
        ("WITH a AS (SELECT 1) INSERT INTO t SELECT * FROM a", True),
        ("CREATE TABLE u (y INTEGER)", True),
    ],
)
def test_which_statements_take_a_turn(statement, writes):
    assert is_write(statement) is writes
