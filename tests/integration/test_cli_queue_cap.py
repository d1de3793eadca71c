"""``orders queue cap``: set, change, clear the per-customer cap; bad usage exits 2 and
writes nothing; the cap in ``status`` and ``watch`` (ADR 0033)."""

from __future__ import annotations

import pytest
import redis as redis_lib
from test_cli_queue_pause import env, orders, queue  # noqa: F401 (the env fixture)


def test_cap_set_shown_and_cleared(env: dict[str, str]) -> None:  # noqa: F811
    with redis_lib.Redis.from_url(env["ORDERS_REDIS_URL"]) as client:
        done = orders(env, "queue", "cap", "logistics", "2")
        assert done.exit_code == 0, done.output
        assert queue(env, client, "logistics").key_cap() == 2
        assert "at most 2 job(s) per customer" in " ".join(orders(env, "status").stdout.split())
        watched = orders(env, "watch", "--once", "--interval", "0.2")
        assert "cap: logistics 2 per customer" in " ".join(watched.stdout.split())
        assert orders(env, "queue", "cap", "logistics", "5").exit_code == 0
        assert queue(env, client, "logistics").key_cap() == 5
        cleared = orders(env, "queue", "cap", "logistics", "--clear")
        assert cleared.exit_code == 0 and queue(env, client, "logistics").key_cap() is None
        again = orders(env, "queue", "cap", "logistics", "--clear")
        assert again.exit_code == 0 and "had no cap" in again.stdout


@pytest.mark.parametrize(
    "args",
    [
        ["logistics", "0"],
        ["logistics", "-1"],
        ["logistics", "1.5"],
        ["logistics", "nan"],
        ["logistics", "100001"],
        ["logistics", "٣"],
        ["nosuchstep", "2"],
        ["logistics"],
        ["logistics", "2", "--clear"],
    ],
)
def test_bad_usage_exits_2_and_writes_nothing(env: dict[str, str], args: list[str]) -> None:  # noqa: F811
    with redis_lib.Redis.from_url(env["ORDERS_REDIS_URL"]) as client:
        result = orders(env, "queue", "cap", *args)
        assert result.exit_code == 2, result.output
        assert not client.keys(env["ORDERS_QUEUE_PREFIX"] + "*keycap*")
