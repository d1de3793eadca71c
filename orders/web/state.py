"""What every request handler of the dashboard shares."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client import CollectorRegistry
from starlette.requests import HTTPConnection
from starlette.templating import Jinja2Templates

from orders.app.bootstrap import App
from orders.observability.cache import TTLCache
from orders.observability.liveness import Verdict
from orders.observability.readiness import cached_readiness
from orders.observability.sampler import Sampler
from orders.observability.snapshot import Snapshot, SystemView
from orders.web.security import Guard
from orders.web.settings import WebSettings


@dataclass
class WebState:
    """The dashboard's parts, built once per server.

    Attributes:
        app: the application (Redis, database, queues).
        settings: the web settings.
        guard: token, session and CSRF checks.
        sampler: queue samples taken by a background thread (charts, rates).
        view: snapshots for the overview (Redis, database and metrics read together),
            cached for a second.
        registry: what ``/metrics`` serves.
        templates: the Jinja2 environment.
        multiproc: the workers' metrics folder.
        readiness: the ``/readyz`` checks, run at most once a second.
    """

    app: App
    settings: WebSettings
    guard: Guard
    sampler: Sampler
    view: SystemView
    registry: CollectorRegistry
    templates: Jinja2Templates
    multiproc: Path
    snapshots: TTLCache[Snapshot] = field(init=False)
    readiness: Callable[[], Verdict] = field(init=False)
    stop: threading.Event = field(default_factory=threading.Event)

    def __post_init__(self) -> None:
        # a fresh queue sample with each snapshot, so queue and order counts agree
        self.snapshots = TTLCache(self.view.look, ttl=1.0)
        self.readiness = cached_readiness(self.app)


def web_state(conn: HTTPConnection) -> WebState:
    """The :class:`WebState` of the app serving ``conn``."""
    return conn.app.state.web  # type: ignore[no-any-return]
