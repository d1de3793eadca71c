"""Chaos tests run the real ``orders chaos`` command: real processes, real signals.

They always use an embedded Redis in the test's data dir, even when
``TEST_REDIS_URL`` names a shared server: killing and restarting Redis is the
point, and a shared server cannot be killed. ``TEST_DATABASE_URL`` is honoured
(the run's database is then a fresh PostgreSQL database).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture
def chaos_env(data_dir: Path, database_url: str) -> dict[str, str]:
    """Environment (dict) of a chaos run: embedded Redis in ``data_dir``, the test's database.

    ``ORDERS_*`` variables of the caller are dropped (``ORDERS_REDIS_URL`` above all).
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORDERS_")}
    env["ORDERS_DATA_DIR"] = str(data_dir)
    env["ORDERS_DATABASE_URL"] = database_url
    return env
