"""A Redis that may evict keys loses queue structures: detect it at start.

With ``maxmemory-policy`` other than ``noeviction`` (``allkeys-lru`` and the
like), Redis deletes whole keys under memory pressure — a ready list, a job
hash, an idempotency key — and jobs vanish without a trace. The outbox sweep
repairs what it can see, but slowly and only for steps it knows of, so
workers refuse such a Redis unless ``ORDERS_ALLOW_KEY_EVICTION`` is set, and
``orders status`` warns.
"""

from __future__ import annotations

from typing import Any

import redis

from orders.app.errors import KeyEvictionPossible
from reliable_queue.cluster import RedisClient, is_cluster

SAFE_POLICY = "noeviction"


def eviction_policies(client: RedisClient) -> list[str]:
    """``maxmemory-policy`` of the server (of every node of a cluster).

    Raises:
        redis.RedisError: CONFIG is refused (a managed Redis) or Redis is unreachable.
    """
    if is_cluster(client):
        replies = client.config_get("maxmemory-policy", target_nodes=client.PRIMARIES)
    else:
        replies = client.config_get("maxmemory-policy")
    return sorted(set(_policies(replies)))


def _policies(reply: Any) -> list[str]:
    if not isinstance(reply, dict):
        return []
    out: list[str] = []
    for key, value in reply.items():
        if isinstance(value, dict):  # a cluster: node -> {name: value}
            out.extend(_policies(value))
        elif _text(key) == "maxmemory-policy":
            out.append(_text(value))
    return out


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def key_eviction_problem(client: RedisClient) -> str | None:
    """One line saying why keys may be evicted, or None when the policy is ``noeviction``.

    An unreadable policy (CONFIG refused) is reported too, as a doubt.

    Raises:
        redis.ConnectionError: Redis unreachable.
    """
    try:
        policies = eviction_policies(client)
    except redis.ConnectionError:
        raise
    except redis.RedisError as exc:
        return (
            f"cannot read Redis maxmemory-policy ({exc.__class__.__name__}); make sure it is "
            "noeviction, or queue keys may be evicted and jobs lost"
        )
    unsafe = [p for p in policies if p != SAFE_POLICY]
    if not unsafe:
        return None
    return (
        f"Redis maxmemory-policy is {', '.join(unsafe)}, not noeviction: under memory pressure "
        "Redis deletes queue keys and jobs vanish (set maxmemory-policy noeviction)"
    )


def check_key_eviction(client: RedisClient, *, allow: bool) -> str | None:
    """Refuse a Redis that may evict keys, unless ``allow``.

    Args:
        client: the Redis client.
        allow: ``ORDERS_ALLOW_KEY_EVICTION``: run anyway (the problem is returned).

    Returns:
        The problem (one line) when allowed or only doubtful; None when safe.

    Raises:
        KeyEvictionPossible: the policy evicts keys and ``allow`` is False.
        redis.ConnectionError: Redis unreachable.
    """
    problem = key_eviction_problem(client)
    if problem and not allow and not problem.startswith("cannot read"):
        raise KeyEvictionPossible(f"{problem}; set ORDERS_ALLOW_KEY_EVICTION=true to run anyway")
    return problem
