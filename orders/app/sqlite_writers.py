"""SQLite writers take turns at the write lock through a file lock, not by sleeping.

SQLite has one write lock per database and no queue for it: a connection that
finds it taken sleeps in SQLite's busy handler (1, 2, 5, 10, 15, 20, 25, ... up
to 100 ms between tries) and tries again. Under a steady stream of short write
transactions, for example eight worker lanes each committing a step batch every
few milliseconds, a writer that has slept long once keeps losing to the ones
that just woke: ``orders place`` took 1.9 s instead of 0.5 s to write 2,000
orders beside four busy step workers, most of it asleep.

Here every connection of the engine takes an exclusive ``flock`` on a lock file
beside the database (``<database>-writers``) before its transaction's first
write, and gives it back right after its commit or rollback. A waiter tries
again every 0.1 to 1 ms, so the write lock is never idle for long and no writer
sleeps for tens of milliseconds. The kernel drops the lock of a process that
dies (kill -9 included), so nothing is left held.

The file lock is only an ordering aid; SQLite's own lock still decides. A
writer that cannot get its turn within the busy timeout goes on without it and
meets SQLite's busy handler as before, and a thread that already holds a turn
through another connection (a nested unit of work) does not wait for itself.

No turn outlives its lease: a worker's writers declare its lease, each holder
records itself in the file, and a waiter that finds a holder past its lease plus
a margin kills it (``orders.app.turn_holders``; a frozen process can neither
commit nor give back SQLite's lock). Writers without a lease are never touched.
"""

from __future__ import annotations

import fcntl
import logging
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, event

from orders.app.turn_holders import (
    LOOK_EVERY_SECONDS,
    Holder,
    HolderWatch,
    process_start,
    turn_margin,
)

#: first words of statements that never take SQLite's write lock
log = logging.getLogger(__name__)

_READS = frozenset({"SELECT", "PRAGMA", "EXPLAIN", "BEGIN", "SAVEPOINT", "RELEASE"})
#: longest pause between two tries of a waiting writer, seconds
MAX_PAUSE_SECONDS = 0.001
#: first pause of a waiting writer, seconds (doubles up to MAX_PAUSE_SECONDS)
FIRST_PAUSE_SECONDS = 0.0001


def is_write(statement: str) -> bool:
    """Does ``statement`` (SQL text) take SQLite's write lock?

    Args:
        statement: one SQL statement as sent to the driver.

    Returns:
        False for ``SELECT``, ``PRAGMA``, ``EXPLAIN`` and transaction control
        other than a commit; True for everything else (``INSERT``, ``UPDATE``,
        ``DELETE``, ``REPLACE``, DDL, and ``WITH`` statements, which may write).
    """
    word = statement.lstrip().split(None, 1)[0].upper() if statement.strip() else ""
    return word not in _READS


class WriterTurns:
    """Serialise the write transactions of every process on one SQLite file.

    Args:
        lock_path: the lock file (created with mode 0600 when missing).
        timeout: longest wait for a turn, seconds; past it the writer goes on
            without one (SQLite's busy timeout then applies as before). A writer
            with a lease waits at least until an overdue holder would be killed.
        lease_seconds: the lease of this process's work (a worker's), seconds: a
            turn it holds longer than that plus :func:`turn_margin` is taken by
            killing the process. None (a command): never killed.
        clock: system-wide monotonic time in seconds, the same in every process
            (``time.monotonic``; injectable for tests).
        sleep: pause function (injectable for tests).
        kill: ``os.kill`` (injectable for tests).
    """

    def __init__(
        self,
        lock_path: Path,
        timeout: float,
        *,
        lease_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        kill: Callable[[int, int], None] = os.kill,
    ) -> None:
        self.lock_path = lock_path
        self.hold_seconds = (
            None if lease_seconds is None else lease_seconds + turn_margin(lease_seconds)
        )
        self.timeout = (
            timeout if self.hold_seconds is None else max(timeout, self.hold_seconds + 1.0)
        )
        self._clock = clock
        self._sleep = sleep
        self._kill = kill
        self._pid = self._start = 0  # this process and its start time (read again after a fork)
        self._guard = threading.Lock()
        self._held: dict[int, tuple[int, int]] = {}  # id(DBAPI connection) -> (fd, thread id)
        self._threads: dict[int, int] = {}  # thread id -> turns it holds
        self._warned = False

    def install(self, engine: Engine) -> None:
        """Make ``engine``'s connections take a turn before their first write.

        The turn is given back after the driver's commit or rollback (the
        engine's dialect's ``do_commit`` / ``do_rollback`` / ``do_close`` are
        wrapped, so the next writer never finds SQLite's lock still held).
        """
        event.listen(engine, "before_cursor_execute", self._before_execute)
        dialect = engine.dialect
        for name in ("do_commit", "do_rollback", "do_close"):
            original = getattr(dialect, name)
            setattr(dialect, name, self._releasing(original))

    def _releasing(self, original: Callable[[Any], None]) -> Callable[[Any], None]:
        def wrapped(connection: Any) -> None:
            # the dialect is handed the pool's proxy; the turn is kept by the DBAPI connection
            try:
                original(connection)
            finally:
                self.release(getattr(connection, "dbapi_connection", connection))

        return wrapped

    def _before_execute(
        self,
        conn: Any,
        _cursor: Any,
        statement: str,
        _parameters: Any,
        _context: Any,
        _executemany: bool,
    ) -> None:
        dbapi_connection = conn.connection.dbapi_connection
        if id(dbapi_connection) not in self._held and is_write(statement):
            self.acquire(dbapi_connection)

    def acquire(self, dbapi_connection: Any) -> bool:
        """Wait for this connection's turn (at most ``timeout`` seconds).

        Returns:
            True when the turn is held (until :meth:`release`); False when the
            thread already holds one through another connection, the wait
            timed out, or the lock file cannot be opened (a directory, a
            symbolic link, no permission: logged once). The write then goes
            on without a turn, ordered by SQLite's busy handler as before:
            the file only orders writers, it never decides a write.
        """
        me = threading.get_ident()
        if self._threads.get(me):
            return False
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        except OSError as exc:
            if not self._warned:
                self._warned = True
                log.warning(
                    "SQLite writers go on without taking turns: cannot open %s (%s)",
                    self.lock_path,
                    exc.strerror or type(exc).__name__,
                )
            return False
        pause = FIRST_PAUSE_SECONDS
        now = self._clock()
        deadline = now + self.timeout
        watch: HolderWatch | None = None
        look_at = now + LOOK_EVERY_SECONDS
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                now = self._clock()
                if now >= deadline:
                    os.close(fd)
                    return False
                if now >= look_at:  # who holds it, and is it past its lease?
                    look_at = now + LOOK_EVERY_SECONDS
                    watch = watch or HolderWatch(fd, self._clock, self._kill)
                    watch.look()
                self._sleep(pause)
                pause = min(pause * 2, MAX_PAUSE_SECONDS)
        try:
            os.pwrite(fd, self._record(), 0)
        except OSError:
            pass  # the turn is held all the same; it just cannot be taken from us
        with self._guard:
            self._held[id(dbapi_connection)] = (fd, me)
            self._threads[me] = self._threads.get(me, 0) + 1
        return True

    def _record(self) -> bytes:
        """This holder's record (``orders.app.turn_holders.Holder``), deadline from now."""
        pid = os.getpid()
        if self._pid != pid:
            self._pid, self._start = pid, process_start(pid) or 0
        deadline = 0.0 if self.hold_seconds is None else self._clock() + self.hold_seconds
        return Holder(pid, self._start, deadline).encode()

    def release(self, dbapi_connection: Any) -> None:
        """Give back the connection's turn, if it holds one (closing the lock's descriptor)."""
        with self._guard:
            held = self._held.pop(id(dbapi_connection), None)
            if held is None:
                return
            fd, owner = held
            left = self._threads.get(owner, 1) - 1
            if left > 0:
                self._threads[owner] = left
            else:
                self._threads.pop(owner, None)
        os.close(fd)  # closing the descriptor drops the flock
