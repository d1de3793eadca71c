"""Redis Cluster support: route a queue's round trips to the node that owns its slot.

Every key of a queue shares the hash tag ``{<name>}``, so all of a queue's
script calls land in one slot. On a ``RedisCluster`` client a round trip is
sent as an ordinary pipeline (or MULTI) on the owning master's own connection,
which keeps it one round trip, lets a ``WAIT`` follow the writes on the same
connection, and avoids ``ClusterPipeline`` (which refuses EVALSHA and MULTI).
A redirect (MOVED / ASK / TRYAGAIN / CLUSTERDOWN: the command did not run)
refreshes the slot table and re-sends only the redirected commands.

On a plain ``redis.Redis`` client every function here is a pass-through.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, TypeAlias

import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import (
    AskError,
    ClusterDownError,
    ReadOnlyError,
    RedisClusterException,
    TryAgainError,
)

from .errors import QueueConnectionError

#: Either client the queue accepts (both created with ``decode_responses=False``).
RedisClient: TypeAlias = "redis.Redis | RedisCluster"

#: Errors meaning "Redis is unreachable or the cluster is between topologies";
#: the queue translates them to :class:`~reliable_queue.QueueConnectionError`.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    ClusterDownError,
    TryAgainError,
    RedisClusterException,
)

#: Re-sends of redirected commands before a round trip gives up (each after a
#: slot-table refresh and a short pause: 0.05 s doubling, about 3 s in all).
REDIRECT_ATTEMPTS = 7

_REDIRECT_PREFIXES = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "READONLY")
_refresh_lock = threading.Lock()


def is_cluster(client: Any) -> bool:
    """True when ``client`` is a redis-py ``RedisCluster``."""
    return isinstance(client, RedisCluster)


def is_redirect(reply: Any) -> bool:
    """True when a pipeline reply is an error saying the command did not run on this node.

    MOVED / ASK (slot elsewhere), TRYAGAIN, CLUSTERDOWN / MASTERDOWN (failover in
    progress) and READONLY (a demoted master) all mean: refresh and send again.
    """
    if isinstance(reply, AskError | TryAgainError | ClusterDownError | ReadOnlyError):
        return True
    return isinstance(reply, redis.ResponseError) and str(reply).startswith(_REDIRECT_PREFIXES)


def node_client(client: RedisClient, key: str | bytes) -> redis.Redis:
    """The client to send a round trip on ``key``'s slot to.

    Args:
        client: a ``redis.Redis`` (returned as is) or a ``RedisCluster``.
        key: any key of the slot (every key of one queue shares it).

    Returns:
        A ``redis.Redis`` connected to the master that owns the slot, per the
        cluster client's current slot table.

    Raises:
        QueueConnectionError: the slot has no known owner (cluster mid-failover).
    """
    if not isinstance(client, RedisCluster):
        return client
    try:
        node = client.nodes_manager.get_node_from_slot(key_slot(_bytes(key)))
        return client.get_redis_connection(node)
    except RedisClusterException as exc:
        refresh(client)
        raise QueueConnectionError(f"no cluster node owns the slot of {key!r}: {exc}") from exc


def refresh(client: RedisClient) -> None:
    """Reload the cluster's slot table (no-op on a plain client, errors swallowed).

    A node that cannot be reached leaves the old table in place; the caller's
    next attempt simply fails again and is retried by its own bounded loop.
    redis-py's own error handling edits the node table from whichever thread
    saw a connection error (it drops the dead node from ``startup_nodes``), so
    a refresh iterating that dict can meet ``RuntimeError: dictionary changed
    size during iteration``: that, too, only means "try again later".
    """
    if not isinstance(client, RedisCluster):
        return
    with _refresh_lock:
        try:
            client.nodes_manager.initialize()
        except (RedisClusterException, redis.RedisError, RuntimeError):
            pass


def pause(attempt: int) -> None:
    """Sleep before re-sending redirected commands: 0.05 s doubling, capped at 1 s."""
    time.sleep(min(0.05 * (2**attempt), 1.0))


def snapshot(
    client: RedisClient, key: str, fill: Callable[[Any], None], *, raise_on_error: bool = True
) -> list[Any]:
    """Run read commands on one slot as a MULTI/EXEC transaction (a consistent view).

    On a cluster the transaction runs on the slot owner's connection (MULTI is
    fine there: every key is in one slot); a redirect refreshes and retries.

    Args:
        client: ``redis.Redis`` or ``RedisCluster``.
        key: a key of the slot every queued command touches.
        fill: adds the read commands to the pipeline it is given.
        raise_on_error: False returns a command's error reply (a key of the wrong type:
            ``WRONGTYPE``) in its place as a ``redis.ResponseError`` instead of raising.

    Returns:
        The replies of the commands, in order.

    Raises:
        QueueConnectionError: unreachable, or still redirected after
            :data:`REDIRECT_ATTEMPTS`.
    """
    for attempt in range(REDIRECT_ATTEMPTS):
        try:
            pipe = node_client(client, key).pipeline(transaction=True)
            fill(pipe)
            return pipe.execute(raise_on_error=raise_on_error)
        except UNAVAILABLE as exc:
            refresh(client)
            raise QueueConnectionError(str(exc)) from exc
        except redis.ResponseError as exc:
            # EXECABORT carries the MOVED of the queued command; a plain reply is the error
            if not is_cluster(client) or not (is_redirect(exc) or "MOVED" in str(exc)):
                raise
            refresh(client)
            pause(attempt)
    raise QueueConnectionError(f"slot of {key!r} still moving after {REDIRECT_ATTEMPTS} tries")


def _bytes(key: str | bytes) -> bytes:
    return key.encode() if isinstance(key, str) else key


#: URL schemes that select the cluster client: the rest of the URL is an ordinary
#: ``redis://`` / ``rediss://`` URL of any one node (the client discovers the others).
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def client_from_url(url: str, **kwargs: Any) -> RedisClient:
    """A bytes-replies client for ``url``: ``RedisCluster`` for a cluster URL, else ``Redis``.

    Args:
        url: ``redis+cluster://host:port`` (or ``rediss+cluster://``) for a cluster
            seeded with one node; ``redis://``, ``rediss://``, ``unix://`` otherwise.
        kwargs: connection options for redis-py (``socket_timeout`` in seconds, ...).

    Raises:
        redis.RedisError / RedisClusterException: a cluster seed node cannot be reached
            (the cluster client reads the slot table when it is built).
    """
    scheme, sep, rest = url.partition("://")
    if scheme in CLUSTER_SCHEMES and sep:
        kwargs.pop("health_check_interval", None)
        return RedisCluster.from_url(
            f"{CLUSTER_SCHEMES[scheme]}://{rest}",
            decode_responses=False,
            cluster_error_retry_attempts=5,
            **kwargs,
        )
    return redis.Redis.from_url(url, **kwargs)


def clients_running(client: RedisClient, command: str) -> int:
    """How many connections are running ``command`` now (e.g. ``blpop``: idle lanes).

    On a cluster every master is asked (a queue's lanes block on its own master),
    never just the one node ``CLIENT LIST`` would go to by default.

    Raises:
        redis.RedisError: a node could not be asked.
    """
    if isinstance(client, RedisCluster):
        per_node = client.client_list(target_nodes=RedisCluster.PRIMARIES)
        lists = per_node.values() if isinstance(per_node, dict) else [per_node]
    else:
        lists = [client.client_list()]
    return sum(1 for entries in lists for c in entries if c.get("cmd") == command)
