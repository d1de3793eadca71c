"""Errors of the application's infrastructure: the database, Redis, the namespace.

They subclass :class:`orders.domain.errors.OrdersError` (the CLI turns every one
into one line and an exit status) but are not rules of the order domain, so
they live beside the code that raises them.
"""

from __future__ import annotations

from orders.domain.errors import OrdersError


class SchemaNotMigrated(OrdersError):
    """The configured database is not at the newest migration; run ``orders db upgrade``."""


class SQLiteTooOld(OrdersError):
    """The SQLite library Python is linked with lacks what orderflow's statements use
    (``RETURNING``: 3.35; ``json_each`` / ``json_extract``); use PostgreSQL or a newer
    Python build."""


class InvalidRedisUrl(OrdersError):
    """``ORDERS_REDIS_URL`` does not parse as a Redis URL."""


class NamespaceClaimed(OrdersError):
    """The Redis namespace (``ORDERS_QUEUE_PREFIX`` on that Redis) belongs to another database."""


class KeyEvictionPossible(OrdersError):
    """Redis may evict keys (``maxmemory-policy`` is not ``noeviction``): jobs would vanish."""
