"""Application settings, read from the environment (prefix ``ORDERS_``).

Nothing here touches the file system or the network: building a ``Settings``
object only reads environment variables. Callers resolve defaults that depend
on the data directory through the ``resolved_*`` methods.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from reliable_queue.limits import MAX_ATTEMPTS, MAX_DELAY_SECONDS, MAX_DLQ_SIZE

DATABASE_SCHEMES = ("sqlite", "postgresql", "postgres")
"""Database URL schemes orderflow runs on (a ``+driver`` suffix is allowed: PostgreSQL
URLs are rewritten to psycopg 3, see ``orders.app.db.normalize_url``)."""

DATABASE_URL_EXAMPLES = "sqlite:///path/to/orders.db or postgresql://user:password@host/db"

#: a queue prefix: it names every Redis key and the data dir's metrics folder, so
#: no separators of either (``:``, braces, whitespace; ``/``, ``..``)
QUEUE_PREFIX_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster")
"""Redis URL schemes a client can be built for (see ``reliable_queue.cluster``)."""

REDIS_URL_EXAMPLES = (
    "redis://host:port/db, rediss://..., unix:///path.sock or redis+cluster://host:port"
)


def _scheme(url: str) -> str | None:
    """The part of ``url`` before ``://`` (lower case), or None when there is none."""
    scheme, sep, _ = url.partition("://")
    return scheme.lower() if sep and scheme else None


class Settings(BaseSettings):
    """Every tunable of orderflow; each field is ``ORDERS_<FIELD NAME>`` in the environment.

    Durations are in seconds; counts are plain integers.
    """

    model_config = SettingsConfigDict(env_prefix="ORDERS_", extra="ignore", allow_inf_nan=False)

    data_dir: Path = Field(
        default=Path(".data"),
        description="Directory for the SQLite file, TPC-H files and embedded Redis data; "
        "a relative path is taken from the current working directory.",
    )
    redis_url: str | None = Field(
        default=None,
        description="Redis URL (redis://, rediss://, unix://), or redis+cluster://host:port "
        "(any node of a Redis Cluster); None starts the embedded server.",
    )
    embedded_redis_tcp: bool = Field(
        default=False,
        description="Give the embedded Redis a loopback TCP port too, with a random password "
        "kept in <data_dir>/redis/redis.password (0600); off, it listens on its unix socket "
        "only. Applies when the server starts.",
    )
    min_replicas: int = Field(
        default=0,
        ge=0,
        le=100,
        description="Replicas that must acknowledge each enqueue / ack / retry / dead letter "
        "/ redrive (Redis WAIT) before it counts; 0 waits for none.",
    )
    replica_timeout_seconds: float = Field(
        default=1.0,
        gt=0,
        le=3600,
        description="Longest wait for those replica acknowledgements, seconds.",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL; None means the SQLite file <data_dir>/orders.db.",
    )
    db_statement_timeout_ms: int = Field(
        default=0,
        ge=0,
        le=86_400_000,
        description="PostgreSQL statement_timeout and lock_timeout of every connection, "
        "milliseconds; 0 derives both from step_time_limit_seconds (0 there too keeps the "
        "server's settings).",
    )
    step_time_limit_seconds: float = Field(
        default=60.0,
        ge=0,
        le=86400,
        description="Longest one run of a step may take, seconds; past it the attempt fails "
        "as timed_out (retried with backoff, dead-lettered at max attempts) and its lane is "
        "freed. 0 means no limit.",
    )
    step_isolation: Literal["thread", "process"] = Field(
        default="thread",
        description="Where a worker runs the step handlers: 'thread' (a lane's thread; a "
        "time limit frees the lane but cannot stop a handler stuck in one C call that holds "
        "the GIL) or 'process' (a child process per lane, killed at the time limit; costs a "
        "start-up per lane and an IPC round trip per handler call).",
    )
    chaos_journal_dir: Path | None = Field(
        default=None,
        description="Where a worker appends its attempt journal (leases and given-up "
        "attempts, one file per process), for the invariants of 'orders chaos', which sets "
        "it; unset: no journal.",
    )
    db_pool_size: int | None = Field(
        default=None,
        ge=1,
        le=1000,
        description="Database connections kept per process; None sizes a worker's pool "
        "from its lanes (one per lane, plus one) and uses 5 elsewhere.",
    )
    queue_prefix: str = Field(default="orderflow", description="Prefix of every Redis key.")
    lease_seconds: float = Field(
        default=30.0,
        gt=0,
        le=86400,
        description="Lease (visibility timeout) of a fetched job, seconds (at most a day).",
    )
    max_attempts: int = Field(
        default=5, ge=1, le=MAX_ATTEMPTS, description="Attempts per job before it is dead-lettered."
    )
    backoff_base_seconds: float = Field(
        default=0.5,
        ge=0,
        le=MAX_DELAY_SECONDS,
        description="First retry delay, seconds; doubles per attempt.",
    )
    backoff_max_seconds: float = Field(
        default=30.0, ge=0, le=MAX_DELAY_SECONDS, description="Cap on one retry delay, seconds."
    )
    job_retention_seconds: int = Field(
        default=3600,
        ge=0,
        le=MAX_DELAY_SECONDS,
        description="How long finished-job records are kept, seconds.",
    )
    idempotency_window_seconds: int = Field(
        default=86400,
        ge=1,
        le=MAX_DELAY_SECONDS,
        description="Lifetime of an idempotency key, seconds.",
    )
    dlq_max_size: int = Field(
        default=100_000,
        ge=1,
        le=MAX_DLQ_SIZE,
        description="Most jobs kept in one dead-letter queue.",
    )
    dlq_max_age_seconds: int = Field(
        default=7 * 24 * 3600,
        ge=1,
        le=MAX_DELAY_SECONDS,
        description="Oldest dead letter kept, seconds.",
    )
    relay_sweep_interval_seconds: float = Field(
        default=2.0, gt=0, le=3600, description="Pause between two outbox relay sweeps, seconds."
    )
    relay_republish_after_seconds: float = Field(
        default=30.0,
        gt=0,
        le=86_400,
        description="A dispatched step unknown to the queue for this long is published "
        "again, seconds.",
    )

    allow_key_eviction: bool = Field(
        default=False,
        description="Let workers run on a Redis whose maxmemory-policy may evict keys "
        "(jobs can then vanish; the outbox sweep re-publishes what it can).",
    )
    relay_reconcile_interval_seconds: float = Field(
        default=10.0,
        gt=0,
        le=86_400,
        description="Pause between two passes of the worker sweep that mark the steps of "
        "dead-lettered jobs dead (their orders then show as blocked everywhere), seconds.",
    )
    relay_publish_max_attempts: int = Field(
        default=8,
        ge=1,
        le=MAX_ATTEMPTS,
        description="Refusals of one outbox row by the queue before it is given up as "
        "unpublishable (its order then shows as blocked; `orders outbox retry` resumes it).",
    )
    relay_publish_backoff_seconds: float = Field(
        default=1.0,
        gt=0,
        le=86_400,
        description="Wait before a refused outbox row is tried again, seconds; doubles per "
        "refusal.",
    )
    relay_publish_backoff_max_seconds: float = Field(
        default=300.0, gt=0, le=86_400, description="Cap on that wait, seconds."
    )
    liveness_heartbeats: int = Field(
        default=3,
        ge=1,
        le=1000,
        description="Grace of a worker's /livez, in heartbeat intervals (a third of the "
        "lease each): a lane stuck this long past what it may wait or run counts as dead.",
    )

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, value: str | None) -> str | None:
        """Refuse a URL of a database orderflow does not run on, naming the schemes it does.

        Raises:
            ValueError: no ``scheme://`` or a scheme other than :data:`DATABASE_SCHEMES`
                (the message never repeats the URL: it may hold a password).
        """
        if not value:
            return value
        scheme = _scheme(value)
        if scheme is None:
            raise ValueError(f"not a database URL; use {DATABASE_URL_EXAMPLES}")
        if scheme.split("+")[0] not in DATABASE_SCHEMES:
            raise ValueError(
                f"unsupported database {scheme.split('+')[0]!r}; supported schemes: "
                f"{', '.join(s + '://' for s in DATABASE_SCHEMES)} (e.g. {DATABASE_URL_EXAMPLES})"
            )
        return value

    @field_validator("queue_prefix")
    @classmethod
    def _safe_queue_prefix(cls, value: str) -> str:
        """Refuse a prefix that is not one plain name, before anything is written.

        The prefix becomes the first part of every Redis key (``<prefix>:{<queue>}:...``)
        and a folder of the data dir (``metrics/<prefix>``): a space, colon or brace
        would break the key layout the queue checks, a slash or ``..`` would put
        files outside the data dir.

        Raises:
            ValueError: not 1-64 letters, digits, ``_``, ``-`` or ``.``, starting with a
                letter or digit, or holding ``..`` (the message shows the value
                escaped and cut to 40 characters).
        """
        if QUEUE_PREFIX_PATTERN.fullmatch(value) and ".." not in value:
            return value
        shown = ascii(value[:40]) + ("..." if len(value) > 40 else "")
        raise ValueError(
            f"{shown} is not a queue prefix: use 1-64 letters, digits, '_', '-' or '.', "
            "starting with a letter or digit (no spaces, ':', braces, '/' or '..')"
        )

    @field_validator("redis_url")
    @classmethod
    def _known_redis_scheme(cls, value: str | None) -> str | None:
        """Refuse a Redis URL whose scheme no client is built for, naming those that are.

        Raises:
            ValueError: no ``scheme://`` or one not in :data:`REDIS_SCHEMES`.
        """
        if not value:
            return value
        scheme = _scheme(value)
        if scheme not in REDIS_SCHEMES:
            raise ValueError(f"not a Redis URL; use {REDIS_URL_EXAMPLES}")
        return value

    def resolved_data_dir(self) -> Path:
        """Return the data directory as an absolute path (not created).

        Returns:
            ``data_dir`` made absolute against the current working directory.
        """
        return self.data_dir.expanduser().resolve()

    def resolved_database_url(self) -> str:
        """Return the database URL to use (not created).

        Returns:
            ``database_url`` when set, else ``sqlite:///<data_dir>/orders.db``.
        """
        if self.database_url:
            return self.database_url
        return f"sqlite:///{self.resolved_data_dir() / 'orders.db'}"

    def uses_embedded_database(self) -> bool:
        """Return True when no ``database_url`` is configured (the SQLite default)."""
        return not self.database_url
