"""EmbeddedRedis: a real redis-server per data dir, shared across processes, crash-safe."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import redis

from reliable_queue.embedded import EmbeddedRedis, RedisStartError, find_redis_server
from reliable_queue.errors import QueueError

# What this checks does not depend on the database: the PostgreSQL pass skips it.
pytestmark = pytest.mark.no_database


@pytest.fixture
def server(tmp_path: Path):
    srv = EmbeddedRedis(tmp_path / "data", appendfsync="always")
    yield srv
    srv.stop(timeout=10.0)


def _pid_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    return not stat.exists() or stat.read_text().rsplit(")", 1)[-1].split()[0] != "Z"


def test_ensure_running_starts_a_server_that_answers_ping_on_its_socket_only(server):
    url = server.ensure_running()

    assert url == server.url and url.startswith("unix://")
    assert server.is_running()
    with redis.Redis.from_url(url) as client:
        assert client.ping()
        info = client.info("server")
        assert int(info["process_id"]) == server.pid
        assert client.config_get("appendonly")["appendonly"] == "yes"
        assert client.config_get("appendfsync")["appendfsync"] == "always"
        assert client.config_get("save")["save"] == ""
        assert client.config_get("dir")["dir"] == str(server.redis_dir)
        assert client.config_get("port")["port"] == "0"  # no TCP listener
        assert client.config_get("protected-mode")["protected-mode"] == "yes"
    assert server.tcp_url is None and server.password is None


def test_second_ensure_running_reuses_the_running_server(server):
    server.ensure_running()
    first_pid = server.pid

    again = EmbeddedRedis(server.data_dir)
    again.ensure_running()

    assert again.pid == first_pid
    assert again.url == server.url


def test_two_processes_starting_at_once_share_one_server(tmp_path):
    data_dir = tmp_path / "data"
    script = textwrap.dedent(
        """
        import sys, time
        from reliable_queue.embedded import EmbeddedRedis
        go_at = float(sys.argv[2])
        while time.time() < go_at:
            time.sleep(0.001)
        server = EmbeddedRedis(sys.argv[1])
        server.ensure_running()
        print(server.pid)
        """
    )
    go_at = str(time.time() + 1.5)  # both interpreters are up by then and start together
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script, str(data_dir), go_at],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        outputs = [proc.communicate(timeout=60) for proc in procs]
        assert [proc.returncode for proc in procs] == [0, 0], outputs
        pids = {int(out.strip()) for out, _ in outputs}
        assert len(pids) == 1
        (pid,) = pids
        assert EmbeddedRedis(data_dir).pid == pid
        assert _pid_exists(pid)
    finally:
        EmbeddedRedis(data_dir).stop(timeout=10.0)


def test_server_outlives_the_process_that_started_it(tmp_path):
    data_dir = tmp_path / "data"
    code = (
        "import sys; from reliable_queue.embedded import EmbeddedRedis as E; "
        "E(sys.argv[1]).ensure_running()"
    )
    subprocess.run([sys.executable, "-c", code, str(data_dir)], check=True, timeout=60)
    server = EmbeddedRedis(data_dir)
    try:
        assert server.is_running()
        assert os.getsid(server.pid) != os.getsid(
            0
        )  # its own session: a Ctrl-C elsewhere misses it
    finally:
        server.stop(timeout=10.0)


def test_data_survives_sigkill_and_restart_with_appendfsync_always(server):
    with redis.Redis.from_url(server.ensure_running()) as client:
        client.set("order:1", "paid")
        client.rpush("jobs", "a", "b", "c")
    killed = server.kill()

    assert killed is not None and not _pid_exists(killed)
    assert not server.is_running()
    assert server.pid == killed  # the stale pid file stays, as after a real crash

    with redis.Redis.from_url(server.ensure_running()) as client:
        assert client.get("order:1") == b"paid"
        assert client.lrange("jobs", 0, -1) == [b"a", b"b", b"c"]
    assert server.pid != killed


def test_a_client_restarts_a_killed_server_but_not_one_stopped_on_purpose(server, caplog):
    server.ensure_running()
    with server.client(socket_timeout=5) as client:
        client.set("order:1", "paid")
        killed = server.kill()
        client.connection_pool.disconnect()  # the next command connects anew

        assert client.get("order:1") == b"paid"  # it found the server dead and restarted it
        assert server.pid != killed and server.is_running()
        assert "was found dead: restarted it" in caplog.text

        server.stop()  # SHUTDOWN removes the pid file: a server stopped on purpose stays down
        client.connection_pool.disconnect()
        with pytest.raises(redis.ConnectionError):
            client.ping()
        assert not server.is_running() and server.pid is None


def test_a_restarted_tcp_server_is_reached_with_its_new_password(tmp_path):
    server = EmbeddedRedis(tmp_path / "data", tcp=True)
    try:
        server.ensure_running()
        first = server.password
        with server.client(socket_timeout=5) as client:
            client.set("k", "v")
            server.kill()
            client.connection_pool.disconnect()
            assert client.get("k") == b"v"
        assert server.password != first
    finally:
        server.stop()


def test_stale_pid_file_of_a_dead_process_is_replaced(server):
    server.redis_dir.mkdir(parents=True)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    server.pid_file.write_text(f"{dead.pid}\n")
    server.port_file.write_text("1\n")

    server.ensure_running()

    assert server.pid != dead.pid
    assert server.is_running()


def test_pid_file_naming_an_unrelated_live_process_is_treated_as_stale(server):
    server.redis_dir.mkdir(parents=True)
    server.pid_file.write_text(f"{os.getpid()}\n")  # alive, but not a redis-server

    server.ensure_running()

    assert server.pid != os.getpid()
    assert server.is_running()


def test_stop_shuts_the_server_down_and_cleans_its_files(server):
    server.ensure_running()
    pid = server.pid

    assert server.stop(timeout=10.0) is True

    assert not _pid_exists(pid)
    assert not server.is_running()
    assert server.pid is None
    assert server.stop() is False  # idempotent


def test_stop_keeps_data_written_with_everysec(tmp_path):
    server = EmbeddedRedis(tmp_path / "data", appendfsync="everysec")
    try:
        with redis.Redis.from_url(server.ensure_running()) as client:
            client.set("k", "v")
        server.stop()  # SHUTDOWN fsyncs the AOF
        with redis.Redis.from_url(server.ensure_running()) as client:
            assert client.get("k") == b"v"
    finally:
        server.stop()


def test_appendfsync_off_runs_without_aof(tmp_path):
    server = EmbeddedRedis(tmp_path / "data", appendfsync="off")
    try:
        with redis.Redis.from_url(server.ensure_running()) as client:
            assert client.config_get("appendonly")["appendonly"] == "no"
    finally:
        server.stop()


def test_invalid_appendfsync_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="appendfsync"):
        EmbeddedRedis(tmp_path, appendfsync="sometimes")  # type: ignore[arg-type]


def test_long_data_dir_uses_a_short_socket_path(tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    server = EmbeddedRedis(deep)
    try:
        url = server.ensure_running()
        assert len(server.socket_path.as_posix()) < 100
        assert str(server.socket_path).startswith("/tmp/")
        with redis.Redis.from_url(url) as client:
            assert client.ping()
    finally:
        server.stop()
    assert not server.socket_path.exists()


def test_failed_start_raises_with_the_log_tail(tmp_path):
    fake = tmp_path / "redis-server"
    fake.write_text("#!/bin/sh\necho 'bad directive' >&2\nexit 1\n")
    fake.chmod(0o755)
    server = EmbeddedRedis(tmp_path / "data", redis_server=str(fake), start_timeout=5)

    with pytest.raises(RedisStartError, match="bad directive") as excinfo:
        server.ensure_running()
    assert isinstance(excinfo.value, QueueError)  # one error root for the package


def test_find_redis_server_returns_an_executable():
    path = find_redis_server()

    assert os.access(path, os.X_OK)
