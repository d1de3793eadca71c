"""The registry one ``/metrics`` endpoint serves, and a small HTTP server for workers.

Every endpoint of one data dir serves the same figures: the sum of what every
worker process recorded in the multi-process folder, and the Redis and
database readings. Scrape one endpoint per data dir (per machine).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector

from orders.app.bootstrap import App
from orders.domain.steps import task_name
from orders.observability.collectors import OrdersCollector, QueueCollector


def metrics_registry(app: App, *, multiproc: Path | None, ttl: float = 5.0) -> CollectorRegistry:
    """A registry with the workers' metrics and the Redis and database collectors.

    Args:
        app: the application (its queues and session factory are read).
        multiproc: the multi-process folder (created if missing); None leaves
            the workers' metrics out.
        ttl: seconds a Redis or database reading is reused across scrapes.

    Raises:
        OSError: the folder cannot be created.
    """
    registry = CollectorRegistry(auto_describe=False)
    if multiproc is not None:
        multiproc.mkdir(parents=True, exist_ok=True)
        MultiProcessCollector(registry, path=str(multiproc))
    registry.register(QueueCollector(app.queues, task_name, ttl=ttl))
    registry.register(OrdersCollector(app.session_factory, ttl=ttl))
    return registry


def render(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The text exposition of ``registry`` and its content type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


def serve(registry: CollectorRegistry, host: str, port: int) -> Any:
    """Serve ``/metrics`` of ``registry`` on ``host:port`` from a daemon thread.

    Args:
        registry: what to expose.
        host: address to bind (``127.0.0.1`` keeps it on this machine).
        port: TCP port (0 picks a free one).

    Returns:
        The server; ``server.server_port`` is the bound port, ``server.shutdown()``
        stops it.

    Raises:
        OSError: the address is in use or cannot be bound.
    """
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=host, registry=registry)
    return server
