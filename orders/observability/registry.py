"""The registry one ``/metrics`` endpoint serves, and a small HTTP server for workers
(``/metrics``, and the health probes ``/livez`` and ``/readyz``).

Every endpoint of one data dir serves the same figures: the sum of what every
worker process recorded in the multi-process folder, and the Redis and
database readings. Scrape one endpoint per data dir (per machine).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest, make_wsgi_app

from orders.app.bootstrap import App
from orders.domain.steps import task_name
from orders.observability.collectors import OrdersCollector, QueueCollector
from orders.observability.liveness import Verdict
from orders.observability.worker_files import WorkerFiles


def metrics_registry(app: App, *, multiproc: Path | None, ttl: float = 5.0) -> CollectorRegistry:
    """A registry with the workers' metrics and the Redis and database collectors.

    Args:
        app: the application (its queues and session factory are read).
        multiproc: the multi-process folder (created if missing); None leaves
            the workers' metrics out (``orders.observability.worker_files``).
        ttl: seconds a Redis or database reading is reused across scrapes.

    Raises:
        OSError: the folder cannot be created.
    """
    registry = CollectorRegistry(auto_describe=False)
    if multiproc is not None:
        multiproc.mkdir(parents=True, exist_ok=True)
        registry.register(WorkerFiles(multiproc))
    registry.register(QueueCollector(app.queues, task_name, ttl=ttl))
    registry.register(OrdersCollector(app.session_factory, ttl=ttl))
    return registry


def render(registry: CollectorRegistry) -> tuple[bytes, str]:
    """The text exposition of ``registry`` and its content type."""
    return generate_latest(registry), CONTENT_TYPE_LATEST


def serve(
    registry: CollectorRegistry,
    host: str,
    port: int,
    probes: Mapping[str, Callable[[], Verdict]] | None = None,
) -> Any:
    """Serve ``/metrics`` of ``registry`` (and ``probes``) on ``host:port`` from a daemon
    thread, one thread per request.

    Args:
        registry: what to expose.
        host: address to bind (``127.0.0.1`` keeps it on this machine).
        port: TCP port (0 picks a free one).
        probes: path -> probe (``/livez``, ``/readyz``): 200 and its lines when it says
            ok, else 503; a probe that raises answers 503 naming the error's class.

    Returns:
        The server; ``server.server_port`` is the bound port, ``server.shutdown()``
        stops it.

    Raises:
        OSError: the address is in use or cannot be bound.
    """
    metrics = make_wsgi_app(registry)
    routes = dict(probes or {})

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        probe = routes.get(environ.get("PATH_INFO", ""))
        if probe is None:
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        try:
            verdict = probe()
        except Exception as exc:  # a probe never takes the server down
            verdict = Verdict(False, (f"probe failed: {type(exc).__name__}",))
        body = verdict.body().encode()
        start_response(
            "200 OK" if verdict.ok else "503 Service Unavailable",
            [
                ("Content-Type", "text/plain; charset=utf-8"),
                ("Content-Length", str(len(body))),
                ("Cache-Control", "no-store"),
            ],
        )
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else [body]

    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]

    class Server(ThreadingMixIn, WSGIServer):
        address_family = family
        daemon_threads = True  # a request in flight never holds up the process's exit

    class QuietHandler(WSGIRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            """No access log: probes come every few seconds."""

    server = make_server(str(address[0]), port, app, Server, handler_class=QuietHandler)
    threading.Thread(target=server.serve_forever, name="metrics-server", daemon=True).start()
    return server
