"""Crash the embedded Redis server and bring it back on the same data dir.

A SIGKILL of ``redis-server`` alone loses nothing it acknowledged: its AOF
writes are already in the operating system's page cache, and the kernel
writes them out. What ``appendfsync everysec`` risks is a power loss or a
kernel crash, which drops up to about a second of writes that were never
fsynced. :class:`RedisCrasher` reproduces that too: while the server is down
it cuts the tail of the append-only file back to the size it had
``lose_window`` seconds before the kill (:class:`AofHistory`). Redis then
restarts from the shortened file (``aof-load-truncated`` drops a cut-off last
command; an unfinished MULTI/EXEC block is dropped whole), exactly as after
such a crash. With ``appendfsync always`` nothing is cut: every write was
fsynced before it was acknowledged.
"""

from __future__ import annotations

import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from reliable_queue.embedded import EmbeddedRedis


def aof_tail(redis_dir: Path) -> Path | None:
    """The append-only file Redis is appending to, or None if there is none yet.

    Redis 7 keeps a manifest in ``appendonlydir/``: the last ``type i`` entry is
    the file being appended to. Redis 6 appends to ``appendonly.aof``.
    """
    folder = redis_dir / "appendonlydir"
    manifests = sorted(folder.glob("*.manifest")) if folder.is_dir() else []
    if manifests:
        current = None
        for line in manifests[0].read_text().splitlines():
            fields = line.split()
            if len(fields) >= 6 and fields[0] == "file" and fields[5] == "i":
                current = folder / fields[1]
        return current if current is not None and current.exists() else None
    single = redis_dir / "appendonly.aof"
    return single if single.exists() else None


@dataclass(frozen=True)
class AofSample:
    """The size of the AOF tail file at one moment (monotonic seconds)."""

    at: float
    path: Path
    inode: int
    size: int


class AofHistory:
    """Samples of the AOF tail's size, so it can be cut back to an earlier size.

    Args:
        redis_dir: the server's directory.
        clock: monotonic seconds.
        keep_seconds: how much history to keep.
    """

    def __init__(
        self,
        redis_dir: Path,
        *,
        clock: Callable[[], float] = time.monotonic,
        keep_seconds: float = 30.0,
    ) -> None:
        self.redis_dir = redis_dir
        self.clock = clock
        self.keep_seconds = keep_seconds
        self.samples: deque[AofSample] = deque()

    def sample(self) -> AofSample | None:
        """Record the tail file's size now (call a few times a second)."""
        path = aof_tail(self.redis_dir)
        if path is None:
            return None
        try:
            st = path.stat()
        except FileNotFoundError:
            return None
        now = self.clock()
        sample = AofSample(now, path, st.st_ino, st.st_size)
        self.samples.append(sample)
        while self.samples and self.samples[0].at < now - self.keep_seconds:
            self.samples.popleft()
        return sample

    def size_before(self, at: float, path: Path, inode: int) -> int | None:
        """The newest size of file ``path`` / ``inode`` sampled at or before ``at``."""
        best = None
        for s in self.samples:
            if s.at <= at and s.path == path and s.inode == inode:
                best = s.size
        return best

    def cut(self, at: float, window: float) -> int:
        """Truncate the tail file to its size ``window`` seconds before ``at``.

        Only call while the server is down.

        Returns:
            Bytes dropped (0 when there is no sample old enough of the current file,
            e.g. the file was rewritten meanwhile).
        """
        path = aof_tail(self.redis_dir)
        if path is None:
            return 0
        st = path.stat()
        size = self.size_before(at - window, path, st.st_ino)
        if size is None or size >= st.st_size:
            return 0
        os.truncate(path, size)
        self.samples.clear()
        return st.st_size - size


@dataclass
class RedisCrashCounts:
    """What :class:`RedisCrasher` did.

    Attributes:
        kills: SIGKILLs of the server.
        restarts: restarts on the same data dir.
        cuts: restarts after which the AOF tail had been cut back.
        bytes_lost: AOF bytes cut in total.
    """

    kills: int = 0
    restarts: int = 0
    cuts: int = 0
    bytes_lost: int = 0


class RedisCrasher:
    """SIGKILLs the embedded server and restarts it on the same data dir.

    Args:
        server: the run's embedded server (started with the run's ``appendfsync``).
        lose_window: seconds of AOF writes to drop at each crash (0: none).
        history: the AOF size samples (``lose_window`` > 0 needs them).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        server: EmbeddedRedis,
        *,
        lose_window: float = 0.0,
        history: AofHistory | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server = server
        self.lose_window = lose_window
        self.history = history or AofHistory(server.redis_dir, clock=clock)
        self.clock = clock
        self.counts = RedisCrashCounts()
        self.down_since: float | None = None

    @property
    def down(self) -> bool:
        """True between :meth:`kill` and :meth:`restart`."""
        return self.down_since is not None

    def kill(self) -> bool:
        """SIGKILL the server (it stays down until :meth:`restart`).

        Returns:
            False when no server was running.
        """
        if self.server.kill() is None:
            return False
        self.down_since = self.clock()
        self.counts.kills += 1
        return True

    def restart(self) -> None:
        """Cut the AOF tail if configured, then start the server again.

        Raises:
            reliable_queue.embedded.EmbeddedRedisError: it did not come back.
        """
        if self.down_since is not None and self.lose_window > 0:
            lost = self.history.cut(self.down_since, self.lose_window)
            if lost:
                self.counts.cuts += 1
                self.counts.bytes_lost += lost
        self.server.ensure_running()
        self.down_since = None
        self.counts.restarts += 1
