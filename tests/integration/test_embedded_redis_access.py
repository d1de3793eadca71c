"""Only the owner reaches the embedded Redis: no TCP listener unless asked for, then a
random password in a 0600 file; private files; a socket directory nobody can plant."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from unprivileged import as_nobody, require_setpriv, world_traversable_dir

from reliable_queue.embedded import EmbeddedRedis, UnsafeSocketDirError


@pytest.fixture
def shared_parent() -> Iterator[Path]:
    path = world_traversable_dir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_server_files_are_private_to_the_owner(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "data", appendfsync="always")
    try:
        with redis.Redis.from_url(server.ensure_running()) as client:
            client.set("k", "v")
        assert mode(server.data_dir) == 0o700 and mode(server.redis_dir) == 0o700
        for path in server.redis_dir.rglob("*"):
            assert mode(path) & 0o077 == 0, (path, oct(mode(path)))
    finally:
        server.stop()


def test_tcp_listener_only_when_asked_and_then_with_a_password(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / "data", tcp=True)
    try:
        server.ensure_running()
        assert server.tcp_url is not None and server.password
        assert mode(server.password_file) == 0o600
        port = int(server.port_file.read_text())
        with redis.Redis(host="127.0.0.1", port=port) as anonymous:
            with pytest.raises(redis.AuthenticationError):
                anonymous.ping()
        with redis.Redis.from_url(server.tcp_url) as client:
            assert client.ping()
            assert client.config_get("protected-mode")["protected-mode"] == "yes"
        with redis.Redis.from_url(server.url) as client:  # the socket needs it too
            assert client.ping()
        other = EmbeddedRedis(server.data_dir)  # another process of the data dir
        assert other.is_running() and other.tcp_url == server.tcp_url
        assert server.password not in Path(f"/proc/{server.pid}/cmdline").read_text()
    finally:
        server.stop()
    assert not server.password_file.exists()


def test_socket_fallback_dir_is_private(tmp_path: Path) -> None:
    server = EmbeddedRedis(tmp_path / ("d" * 60) / ("e" * 60))
    folder = server.socket_path.parent
    assert folder == Path("/tmp") / f"orderflow-{os.getuid()}"
    try:
        server.ensure_running()
        assert mode(folder) == 0o700 and folder.stat().st_uid == os.getuid()
    finally:
        server.stop()


def test_a_socket_dir_open_to_others_or_owned_by_another_user_is_refused(
    tmp_path: Path,
) -> None:
    server = EmbeddedRedis(tmp_path / ("d" * 60) / ("e" * 60))
    folder = server.socket_path.parent
    folder.mkdir(mode=0o700, exist_ok=True)
    original = mode(folder)
    try:
        folder.chmod(0o777)
        with pytest.raises(UnsafeSocketDirError, match="open to other users"):
            server.ensure_running()
        folder.chmod(0o700)
        if os.geteuid() == 0:
            os.chown(folder, 65534, 65534)
            with pytest.raises(UnsafeSocketDirError, match="belongs to uid 65534"):
                server.ensure_running()
    finally:
        os.chown(folder, os.getuid(), os.getgid())
        folder.chmod(original)
        server.stop()


def test_another_local_user_cannot_reach_the_server_or_its_files(shared_parent: Path) -> None:
    require_setpriv()
    redis_cli = shutil.which("redis-cli")
    server = EmbeddedRedis(shared_parent / "data", tcp=True)
    try:
        server.ensure_running()
        port = server.port_file.read_text().strip()
        aof = [p for p in server.redis_dir.rglob("*") if "appendonly" in p.name]
        for path in [server.log_file, server.password_file, *aof]:
            denied = as_nobody(["cat", str(path)])
            assert denied.returncode != 0 and "Permission denied" in denied.stderr, path
        if redis_cli:
            over_tcp = as_nobody([redis_cli, "-h", "127.0.0.1", "-p", port, "DBSIZE"])
            assert "NOAUTH" in over_tcp.stdout + over_tcp.stderr
            over_socket = as_nobody([redis_cli, "-s", str(server.socket_path), "DBSIZE"])
            assert "(integer)" not in over_socket.stdout
    finally:
        server.stop()
