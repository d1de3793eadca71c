"""``orders queue limit``: set, change, clear; bad usage exits 2 and writes nothing;
the limit in ``status`` and ``watch`` (ADR 0032)."""

from __future__ import annotations

import pytest
import redis as redis_lib
from test_cli_queue_pause import env, orders, queue  # noqa: F401 (the env fixture)

from reliable_queue.rate_limits import RateLimit


def test_limit_set_shown_and_cleared(env: dict[str, str]) -> None:  # noqa: F811
    with redis_lib.Redis.from_url(env["ORDERS_REDIS_URL"]) as client:
        done = orders(env, "queue", "limit", "points", "200/s")
        assert done.exit_code == 0, done.output
        assert queue(env, client, "points").rate_limit() == RateLimit(200, 1000)
        assert "rate-limited to 200/s" in " ".join(orders(env, "status").stdout.split())
        watched = orders(env, "watch", "--once", "--interval", "0.2")
        assert "limit: points 200/s" in " ".join(watched.stdout.split())
        assert orders(env, "queue", "limit", "points", "5/m").exit_code == 0
        assert queue(env, client, "points").rate_limit() == RateLimit(5, 60_000)
        cleared = orders(env, "queue", "limit", "points", "--clear")
        assert cleared.exit_code == 0 and queue(env, client, "points").rate_limit() is None


@pytest.mark.parametrize(
    "args",
    [
        ["points", "-1/s"],
        ["points", "0/s"],
        ["points", "nan/s"],
        ["points", "abc"],
        ["nosuchstep", "1/s"],
        ["points"],
        ["points", "1/s", "--clear"],
    ],
)
def test_bad_usage_exits_2_and_writes_nothing(env: dict[str, str], args: list[str]) -> None:  # noqa: F811
    with redis_lib.Redis.from_url(env["ORDERS_REDIS_URL"]) as client:
        result = orders(env, "queue", "limit", *args)
        assert result.exit_code == 2, result.output
        assert not client.keys(env["ORDERS_QUEUE_PREFIX"] + "*limit*")
