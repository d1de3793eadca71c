"""One Redis namespace belongs to one database.

Two databases sharing a queue namespace share idempotency keys
``<workflow id>:<step>`` for the same ids: every publish of the second is
absorbed as a duplicate of the first's jobs, and no step ever runs. The
namespace therefore carries a claim, ``<prefix>:database`` = the id of the
database that first used it (``workflows.identity``); any other database is
refused with one line naming both. ``rebind_namespace`` hands a namespace
over (its keys are deleted first). A running worker reads the claim again
(:func:`holder`) before each batch and at every sweep, and stops serving a
namespace handed to another database (``orders.worker.binding``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from orders.app.errors import NamespaceClaimed
from reliable_queue.cluster import RedisClient
from reliable_queue.namespace import delete_namespace


@dataclass(frozen=True)
class DatabaseLabel:
    """A database as the claim names it.

    Attributes:
        id: the database's id (UUID string).
        url: its URL with the password masked (shown to the next claimant).
    """

    id: str
    url: str


def claim_key(prefix: str) -> str:
    """The Redis key holding the claim of namespace ``prefix``."""
    return f"{prefix}:database"


def holder(client: RedisClient, prefix: str, database: DatabaseLabel) -> DatabaseLabel:
    """The database that holds namespace ``prefix`` now; ``database`` claims it if none does.

    One GET while the claim stands (no write), so a worker may ask before every
    batch; a claim lost with Redis data is taken again with ``SET NX``.

    Args:
        client: the Redis client.
        prefix: the queue prefix (``ORDERS_QUEUE_PREFIX``).
        database: this database's id and masked URL (the claimant when none holds it).

    Returns:
        The holder: ``database`` itself, or the other database as its claim names it
        (an unreadable claim names an id no database has).

    Raises:
        redis.RedisError: Redis unreachable.
    """
    key = claim_key(prefix)
    raw = client.get(key)
    if raw is None:
        if client.set(key, json.dumps({"id": database.id, "url": database.url}), nx=True):
            return database
        raw = client.get(key)
    return _read_claim(raw)


def bind_namespace(
    client: RedisClient, prefix: str, database: DatabaseLabel, redis_label: str
) -> None:
    """Claim namespace ``prefix`` for ``database``, or check that it already holds it.

    Args:
        client: the Redis client.
        prefix: the queue prefix (``ORDERS_QUEUE_PREFIX``).
        database: this database's id and masked URL.
        redis_label: the Redis as the error message names it (masked URL).

    Raises:
        NamespaceClaimed: another database holds the namespace (one-line message
            naming both databases and the way out).
        redis.RedisError: Redis unreachable.
    """
    other = holder(client, prefix, database)
    if other.id == database.id:
        return
    raise NamespaceClaimed(
        f"Redis namespace {prefix!r} on {redis_label} belongs to database "
        f"{other.id[:8]} ({other.url}), not to this database {database.id[:8]} "
        f"({database.url}): set another ORDERS_QUEUE_PREFIX or ORDERS_REDIS_URL, or run "
        "`orders db rebind-redis` to delete that namespace's keys and bind it to this database"
    )


def namespace_lost(
    prefix: str, redis_label: str, database: DatabaseLabel, other: DatabaseLabel
) -> NamespaceClaimed:
    """The error of a worker whose namespace was handed to ``other`` while it served it.

    Returns:
        A :class:`NamespaceClaimed` with one line naming both databases.
    """
    return NamespaceClaimed(
        f"Redis namespace {prefix!r} on {redis_label} now belongs to database "
        f"{other.id[:8]} ({other.url}), not to this worker's database {database.id[:8]} "
        f"({database.url}): stopped serving it (`orders db rebind-redis` hands a "
        "namespace over; point this database at another ORDERS_QUEUE_PREFIX or Redis)"
    )


def rebind_namespace(client: RedisClient, prefix: str, database: DatabaseLabel) -> int:
    """Delete every key of namespace ``prefix`` and claim it for ``database``.

    The queue library deletes the keys (``reliable_queue.namespace.delete_namespace``:
    its own and the application's under the prefix); the claim is the application's
    key (``<prefix>:database``, outside every queue's hash tag).

    The previous database's jobs, dead letters and idempotency keys are gone
    afterwards; its steps are that database's business (its sweep re-publishes
    them if it is ever pointed here again, after its own rebind).

    Returns:
        Keys deleted.

    Raises:
        redis.RedisError: Redis unreachable (some keys may be deleted; run it again).
    """
    deleted = delete_namespace(client, prefix)
    client.set(claim_key(prefix), json.dumps({"id": database.id, "url": database.url}))
    return deleted


def _read_claim(raw: bytes | None) -> DatabaseLabel:
    if raw is None:
        return DatabaseLabel("(claim vanished)", "?")
    try:
        data = json.loads(raw)
        return DatabaseLabel(str(data["id"])[:36], _printable(str(data.get("url", "?")))[:200])
    except (ValueError, KeyError, TypeError):
        return DatabaseLabel("(unreadable claim)", "?")


def _printable(text: str) -> str:
    return "".join(c if c.isprintable() else "?" for c in text)
