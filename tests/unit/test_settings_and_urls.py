"""Settings defaults and environment, and database URL handling."""

from __future__ import annotations

from pathlib import Path

import pytest

from orders.app.db import normalize_url, sqlite_path
from orders.app.settings import Settings


@pytest.fixture
def clean_env(monkeypatch):
    import os

    for name in list(os.environ):
        if name.startswith("ORDERS_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_defaults(clean_env):
    settings = Settings()
    assert settings.data_dir == Path(".data")
    assert settings.redis_url is None and settings.database_url is None
    assert settings.queue_prefix == "orderflow"
    assert (settings.lease_seconds, settings.max_attempts) == (30.0, 5)
    assert (settings.backoff_base_seconds, settings.backoff_max_seconds) == (0.5, 30.0)
    assert settings.job_retention_seconds == 3600
    assert settings.idempotency_window_seconds == 86400
    assert (settings.dlq_max_size, settings.dlq_max_age_seconds) == (100_000, 7 * 24 * 3600)
    assert settings.relay_sweep_interval_seconds == 2.0
    assert settings.relay_republish_after_seconds == 30.0
    assert settings.uses_embedded_database()


def test_default_database_is_a_sqlite_file_in_the_data_dir(clean_env, tmp_path):
    clean_env.setenv("ORDERS_DATA_DIR", str(tmp_path / "d"))
    settings = Settings()
    assert settings.resolved_database_url() == f"sqlite:///{tmp_path / 'd' / 'orders.db'}"
    assert not (tmp_path / "d").exists()  # nothing created by reading settings


def test_environment_overrides_with_the_orders_prefix(clean_env):
    clean_env.setenv("ORDERS_DATABASE_URL", "postgresql://u@h/db")
    clean_env.setenv("ORDERS_MAX_ATTEMPTS", "9")
    clean_env.setenv("ORDERS_LEASE_SECONDS", "2.5")
    settings = Settings()
    assert settings.resolved_database_url() == "postgresql://u@h/db"
    assert not settings.uses_embedded_database()
    assert (settings.max_attempts, settings.lease_seconds) == (9, 2.5)


def test_invalid_values_are_refused(clean_env):
    clean_env.setenv("ORDERS_MAX_ATTEMPTS", "0")
    with pytest.raises(ValueError):
        Settings()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("postgresql://u:p@h:5432/db", "postgresql+psycopg://u:p@h:5432/db"),
        ("postgres://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgresql+psycopg2://u@h/db", "postgresql+psycopg://u@h/db"),
        ("postgresql+psycopg://u@h/db", "postgresql+psycopg://u@h/db"),
        ("sqlite:////tmp/x.db", "sqlite:////tmp/x.db"),
    ],
)
def test_postgres_urls_use_psycopg_3(url, expected):
    assert normalize_url(url) == expected


def test_sqlite_path_of_file_and_memory_urls():
    assert sqlite_path("sqlite:////tmp/a/orders.db") == Path("/tmp/a/orders.db")
    assert sqlite_path("sqlite://") is None
    assert sqlite_path("sqlite:///:memory:") is None
    assert sqlite_path("postgresql://h/db") is None
