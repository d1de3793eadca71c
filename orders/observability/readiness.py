"""Can this process do its work now: Redis and the database answer (``/readyz``).

Four checks, each a line of the answer: ``redis`` (PING), ``database``
(``SELECT 1``), ``namespace`` (the Redis namespace is bound to this database,
``orders.app.namespace``) and ``eviction`` (Redis will not evict queue keys, or
``ORDERS_ALLOW_KEY_EVICTION`` says to run anyway). A failed check names the
error's class only, never its text (the probe is open to unauthenticated
clients); the full, masked text goes to the log. The answer is cached for
``ttl`` seconds so probes cost at most one round of checks per second. See
[ADR 0042](../../docs/adr/0042-worker-gauges-from-live-slots.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import text

from orders.app.bootstrap import App
from orders.app.errors import KeyEvictionPossible
from orders.app.eviction import check_key_eviction
from orders.observability.cache import TTLCache
from orders.observability.liveness import Verdict
from orders.observability.urls import mask_urls_in

log = logging.getLogger("orders.health")


def _redis(app: App) -> str | None:
    app.redis.ping()
    return None


def _database(app: App) -> str | None:
    with app.session_factory() as session:
        session.execute(text("SELECT 1"))
    return None


def _namespace(app: App) -> str | None:
    holder = app.namespace_holder()
    if holder.id == app.database_label.id:
        return None
    return "bound to another database (`orders db rebind-redis`)"


def _eviction(app: App) -> str | None:
    try:  # the workers' own rule: a policy that cannot be read is a doubt, not a refusal
        check_key_eviction(app.redis, allow=app.settings.allow_key_eviction)
    except KeyEvictionPossible:
        return "Redis may evict queue keys (maxmemory-policy)"
    return None


CHECKS: tuple[tuple[str, Callable[[App], str | None]], ...] = (
    ("redis", _redis),
    ("database", _database),
    ("namespace", _namespace),
    ("eviction", _eviction),
)
"""Name -> check: None when it passes, else a short, fixed reason; may raise."""


def readiness(app: App) -> Verdict:
    """Run every check once (a check that raises fails with the error's class name).

    The namespace and eviction checks need Redis (and the namespace check the
    database): when one of those is down they are skipped, not failed twice.

    Args:
        app: the application (its Redis client, session factory and settings).
    """
    lines: list[str] = []
    failed: set[str] = set()
    for name, check in CHECKS:
        if (name == "namespace" and failed & {"redis", "database"}) or (
            name == "eviction" and "redis" in failed
        ):
            lines.append(f"skip {name}")
            continue
        try:
            problem = check(app)
        except Exception as exc:
            message = (mask_urls_in(str(exc)).splitlines() or [""])[0]
            log.warning("readiness: %s failed: %s: %s", name, type(exc).__name__, message)
            problem = type(exc).__name__
        if problem is None:
            lines.append(f"ok {name}")
        else:
            failed.add(name)
            lines.append(f"fail {name}: {problem}")
    return Verdict(not failed, tuple(lines))


def cached_readiness(app: App, ttl: float = 1.0) -> Callable[[], Verdict]:
    """:func:`readiness` of ``app``, run at most once per ``ttl`` seconds."""
    cache = TTLCache(lambda: readiness(app), ttl)
    return cache.get
