"""Redis Cluster fixtures, loaded as a plugin beside ``orderflow_fixtures``.

Fixtures:
    redis_cluster (session) -> LocalCluster: 3 masters + 3 replicas on loopback ports,
        started once per session from the redis-server binary, stopped at the end.
        Tests must not kill its nodes (use ``private_cluster`` for that).
    cluster_client (function) -> RedisCluster on :func:`redis_cluster` (bytes replies).
    private_cluster (function) -> LocalCluster a test may kill nodes of (about 3 s to start).
    private_cluster_client (function) -> RedisCluster on :func:`private_cluster`.

Each client fixture closes its client at teardown, whatever the test's outcome,
and before the cluster it talks to stops.

Where redis-server >= 5 / redis-cli are missing the tests using these are skipped,
saying so; CI machines have them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from local_cluster import LocalCluster, redis_server_binary
from redis.cluster import RedisCluster

from reliable_queue.cluster import client_from_url

_NO_BINARY = "Redis Cluster tests need redis-server >= 5 and redis-cli on PATH"


@pytest.fixture(scope="session")
def redis_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A running 3-master, 3-replica cluster shared by the session (read-only topology)."""
    if redis_server_binary() is None:
        pytest.skip(_NO_BINARY)
    cluster = LocalCluster(tmp_path_factory.mktemp("cluster")).start()
    try:
        yield cluster
    finally:
        cluster.stop()


def cluster_client_for(cluster: LocalCluster) -> RedisCluster:
    """A bytes-replies cluster client (socket timeout 10 s) on ``cluster``."""
    return client_from_url(cluster.url, socket_timeout=10.0, socket_connect_timeout=2.0)  # type: ignore[return-value]


@pytest.fixture
def cluster_client(redis_cluster: LocalCluster) -> Iterator[RedisCluster]:
    """A ``RedisCluster`` client on the session cluster, closed after the test."""
    client = cluster_client_for(redis_cluster)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def private_cluster(tmp_path: Path) -> Iterator[LocalCluster]:
    """A cluster of this test's own, which it may kill nodes of; stopped at teardown."""
    if redis_server_binary() is None:
        pytest.skip(_NO_BINARY)
    cluster = LocalCluster(tmp_path / "cluster").start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def private_cluster_client(private_cluster: LocalCluster) -> Iterator[RedisCluster]:
    """A ``RedisCluster`` client on the test's own cluster, closed after the test."""
    client = cluster_client_for(private_cluster)
    try:
        yield client
    finally:
        client.close()
