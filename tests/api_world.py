"""The API on a real database and Redis, for the ``test_api_*`` tests: an app, the small
catalog, one token per role, and a test client on ``orders web``'s application."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from sqlalchemy import Engine
from starlette.testclient import TestClient

from orders.app.bootstrap import App, build
from orders.app.settings import Settings
from orders.app.tokens import create_token
from orders.domain.access import Role
from orders.web.app import create_app
from orders.web.settings import WebSettings
from workflows.uow import UnitOfWork

ENV_TOKEN = "the-configured-web-token-0123456789"
BASE = "http://127.0.0.1:8080"


@dataclass
class ApiWorld:
    """The app, a client, and the bearer headers of one token per role (and a second
    placer, ``other``)."""

    app: App
    client: TestClient
    headers: dict[str, dict[str, str]]

    def as_role(self, role: str) -> dict[str, str]:
        """The ``Authorization`` header of the token of ``role`` (or ``other``, ``env``)."""
        return dict(self.headers[role])


def tokens_for(app: App) -> dict[str, dict[str, str]]:
    """One token per role, plus ``other`` (a second placer) and ``env`` (ORDERS_WEB_TOKEN)."""
    out = {"env": {"Authorization": f"Bearer {ENV_TOKEN}"}}
    with UnitOfWork(app.session_factory) as uow:
        for name, role in [*((r, r) for r in Role.ALL), ("other", Role.PLACER)]:
            text = create_token(uow.session, name, role)
            out[name] = {"Authorization": f"Bearer {text}"}
        uow.commit()
    return out


@pytest.fixture
def api_world(
    engine: Engine,
    redis_client: redis.Redis,
    key_prefix: str,
    tmp_path: Path,
    catalog: dict[int, int],
) -> Iterator[ApiWorld]:
    """The API on a fresh database with the small catalog (customers 1-3, parts 10-14)."""
    settings = Settings(data_dir=tmp_path / "data", queue_prefix=key_prefix)
    app = build(settings, redis_override=redis_client, engine_override=engine)
    web = create_app(
        app,
        WebSettings(
            token=ENV_TOKEN,
            api_rate_per_second=10_000,
            api_burst=10_000,
            allowed_hosts="testserver",  # the host name of ASGI test transports
        ),
        multiproc=tmp_path / "metrics",
        sample=False,
    )
    headers = tokens_for(app)
    with TestClient(web, base_url=BASE, client=("127.0.0.1", 50000)) as client:
        yield ApiWorld(app, client, headers)
