"""The one place that builds everything from settings (no globals, no import-time I/O).

Tests and commands call :func:`build` and may hand in their own parts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from opentelemetry.trace import Tracer, TracerProvider
from redis.exceptions import RedisError
from sqlalchemy import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from orders.app.db import make_engine, make_session_factory, sqlite_path, worker_pool_size
from orders.app.errors import InvalidRedisUrl, SchemaNotMigrated
from orders.app.namespace import DatabaseLabel, bind_namespace, holder
from orders.app.private_files import private_dir
from orders.app.schema_head import at_head
from orders.app.settings import Settings
from orders.domain.steps import ALL_STEPS, queue_name
from orders.observability.urls import mask_url, remember_url
from reliable_queue import Queue, QueueSettings
from reliable_queue.cluster import RedisClient, client_from_url
from reliable_queue.embedded import EmbeddedRedis
from reliable_queue.errors import QueueConnectionError
from workflows.identity import database_id
from workflows.publisher import QueuePublisher
from workflows.relay import PublishPolicy


def queue_settings(settings: Settings) -> QueueSettings:
    """Map the application's settings onto the queue library's (same units: seconds)."""
    return QueueSettings(
        lease_seconds=settings.lease_seconds,
        default_max_attempts=settings.max_attempts,
        job_retention_seconds=settings.job_retention_seconds,
        idempotency_window_seconds=settings.idempotency_window_seconds,
        dlq_max_size=settings.dlq_max_size,
        dlq_max_age_seconds=settings.dlq_max_age_seconds,
        min_replicas=settings.min_replicas,
        replica_timeout_seconds=settings.replica_timeout_seconds,
        default_time_limit_seconds=settings.step_time_limit_seconds,
    )


def db_timeout_ms(settings: Settings) -> int:
    """PostgreSQL statement_timeout / lock_timeout of every connection, milliseconds.

    ``db_statement_timeout_ms`` when set, else the step time limit (so a statement
    blocked on a lock fails with the step instead of holding its connection); 0
    keeps the server's settings.
    """
    if settings.db_statement_timeout_ms > 0:
        return settings.db_statement_timeout_ms
    return int(settings.step_time_limit_seconds * 1000)


def redis_url(settings: Settings) -> tuple[str, EmbeddedRedis | None]:
    """The Redis URL to use, starting the embedded server when none is configured.

    Returns:
        ``(url, embedded)``; ``embedded`` is None for a configured URL.

    Raises:
        reliable_queue.embedded.EmbeddedRedisError: the embedded server cannot start.
    """
    if settings.redis_url:
        return settings.redis_url, None
    private_dir(settings.resolved_data_dir())
    server = EmbeddedRedis(settings.resolved_data_dir(), tcp=settings.embedded_redis_tcp)
    return server.ensure_running(), server


def client_timeouts(block_seconds: float) -> dict[str, float]:
    """Socket settings of every Redis client, seconds: the read timeout outlasts the
    longest blocking wait (``block_seconds``)."""
    return {
        "socket_timeout": block_seconds + 10.0,
        "socket_connect_timeout": 5.0,
        "health_check_interval": 30,
    }


def redis_client(url: str, *, block_seconds: float = 2.0) -> RedisClient:
    """A bytes-replies client whose socket timeout outlasts the longest blocking wait.

    Args:
        url: ``redis://``, ``rediss://`` or ``unix://`` URL, or ``redis+cluster://host:port``
            (any node of a Redis Cluster) for the cluster client.
        block_seconds: longest BLPOP the workers issue, seconds.

    Raises:
        InvalidRedisUrl: the URL does not parse.
        redis.RedisError / redis.exceptions.RedisClusterException: a cluster URL whose
            node cannot be reached (the cluster client reads the slot table at once).
    """
    remember_url(url)  # its password is masked in every text from now on
    try:
        return client_from_url(url, **client_timeouts(block_seconds))
    except ValueError as exc:
        raise InvalidRedisUrl(
            f"ORDERS_REDIS_URL {mask_url(url)!r} is not a Redis URL: {exc} "
            "(use redis://host:port/db, rediss://..., unix:///path.sock or redis+cluster://host:port)"
        ) from exc


@dataclass
class App:
    """Everything a command needs, built lazily from settings.

    Attributes:
        settings: the application settings.
        redis_override / engine_override: parts handed in by a caller (tests).
        tracer_provider: where this process's spans go (``orders.observability.tracing``
            builds it from ``ORDERS_TRACES`` and ``OTEL_*``); None: tracing is off, and
            the trace contexts of rows and jobs are carried on unrecorded.
    """

    settings: Settings
    redis_override: RedisClient | None = None
    engine_override: Engine | None = None
    tracer_provider: TracerProvider | None = None
    embedded: EmbeddedRedis | None = field(default=None, init=False)
    _bound: bool = field(default=False, init=False)

    @cached_property
    def redis(self) -> RedisClient:
        """The Redis client (starts the embedded server on first use if needed).

        A client of the embedded server restarts it when it finds it dead
        (``EmbeddedRedis.client``): a worker whose server was killed brings it back.
        """
        if self.redis_override is not None:
            return self.redis_override
        url, self.embedded = redis_url(self.settings)
        block_seconds = queue_settings(self.settings).max_block_seconds
        if self.embedded is not None:
            return self.embedded.client(**client_timeouts(block_seconds))
        return redis_client(url, block_seconds=block_seconds)

    auto_migrate: bool = False
    #: the database is known to be at the newest migration (a worker's isolated child:
    #: its worker checked): the engine skips the check, and Alembic's import
    schema_checked: bool = False
    #: connections kept by the engine; a worker sets it from its lanes before first use
    pool_size: int = 5
    #: a worker's: no transaction of the engine outlives the lease (``make_engine``)
    lease_bound: bool = False

    @cached_property
    def engine(self) -> Engine:
        """The SQLAlchemy engine.

        The embedded SQLite database (and any database when ``auto_migrate`` is set,
        as the demo does) is migrated on first use; a configured database that is
        not at the newest revision is refused.

        Raises:
            SchemaNotMigrated: a configured database needs ``orders db upgrade`` (a
                configured SQLite file that does not exist is not created here).
        """
        if self.engine_override is not None:
            return self.engine_override
        url = self.settings.resolved_database_url()
        if self.settings.uses_embedded_database():
            private_dir(self.settings.resolved_data_dir())  # before the file is created
        elif not self.auto_migrate:
            path = sqlite_path(url)
            if path is not None and not path.exists():  # a mistyped path: make nothing
                raise SchemaNotMigrated(
                    f"no database file at {str(path)!r} (ORDERS_DATABASE_URL={url}): check "
                    "the path, or create the database there with `orders db upgrade`"
                )
        engine = make_engine(
            url,
            pool_size=self.settings.db_pool_size or self.pool_size,
            statement_timeout_ms=db_timeout_ms(self.settings),
            lock_timeout_ms=db_timeout_ms(self.settings),
            lease_seconds=self.settings.lease_seconds if self.lease_bound else None,
        )
        # at the head already (the usual case): one query on this engine's first
        # connection, no Alembic; anything else goes Alembic's way below
        if not self.schema_checked and not at_head(engine):
            try:
                self._check_schema(url)
            except BaseException:
                engine.dispose()
                raise
        return engine

    def _check_schema(self, url: str) -> None:
        """Migrate the embedded database (or any, with ``auto_migrate``); refuse a
        configured one that is not at the newest revision (SchemaNotMigrated)."""
        from orders.app.migrate import current_revision, head_revision, upgrade_database

        if self.settings.uses_embedded_database() or self.auto_migrate:
            private_dir(self.settings.resolved_data_dir())
            upgrade_database(url)
            return
        current, head = current_revision(url), head_revision()
        if current != head:
            raise SchemaNotMigrated(
                f"the database is at migration {current or 'none'}, not {head}: "
                "run `orders db upgrade` first"
            )

    @cached_property
    def session_factory(self) -> sessionmaker[Session]:
        """Session factory on :attr:`engine`."""
        return make_session_factory(self.engine)

    @cached_property
    def queue_settings(self) -> QueueSettings:
        """The queue library's settings derived from :attr:`settings`."""
        return queue_settings(self.settings)

    def tracer(self, name: str) -> Tracer | None:
        """The tracer named ``name`` (an instrumentation scope: ``orders.placement``),
        or None when tracing is off."""
        if self.tracer_provider is None:
            return None
        return self.tracer_provider.get_tracer(name)

    def queue(self, name: str) -> Queue:
        """The :class:`Queue` named ``name`` under the application's prefix (with a
        tracer when tracing is on: each enqueued job gets a producer span)."""
        return Queue(
            self.redis,
            name,
            prefix=self.settings.queue_prefix,
            settings=self.queue_settings,
            tracer=self.tracer("reliable_queue"),
        )

    @cached_property
    def queues(self) -> dict[str, Queue]:
        """One queue per step, by step name (the namespace is bound first).

        When Redis or the database cannot be reached yet, the queues are built
        unbound (a dashboard still starts and says what it cannot read); the
        publisher and the workers bind before their first write.

        Raises:
            NamespaceClaimed: the Redis namespace belongs to another database.
        """
        try:
            self.bind_namespace()
        except (RedisError, QueueConnectionError, SQLAlchemyError):
            pass  # unreachable: every writer binds again before writing
        return {step: self.queue(queue_name(step)) for step in ALL_STEPS}

    @cached_property
    def database_label(self) -> DatabaseLabel:
        """This database's id and masked URL (``orders.app.namespace``)."""
        url = self.engine.url.render_as_string(hide_password=True)
        return DatabaseLabel(database_id(self.session_factory), mask_url(url))

    def redis_label(self) -> str:
        """The Redis in use, for messages (password masked)."""
        if self.settings.redis_url:
            return mask_url(self.settings.redis_url)
        return f"the embedded Redis of {self.settings.resolved_data_dir()}"

    def bind_namespace(self) -> None:
        """Claim the Redis namespace for this database, or check that it holds it.

        Raises:
            NamespaceClaimed: another database holds the namespace.
            redis.RedisError: Redis unreachable.
        """
        if self._bound:
            return
        bind_namespace(
            self.redis, self.settings.queue_prefix, self.database_label, self.redis_label()
        )
        self._bound = True

    def namespace_holder(self) -> DatabaseLabel:
        """The database that holds the Redis namespace now, read afresh (one GET; the
        namespace is claimed for this database if no one holds it).

        Raises:
            redis.RedisError: Redis unreachable.
        """
        return holder(self.redis, self.settings.queue_prefix, self.database_label)

    @cached_property
    def publisher(self) -> QueuePublisher:
        """The relay's publisher onto the step queues (the namespace is bound first).

        Raises:
            NamespaceClaimed: the Redis namespace belongs to another database.
            redis.RedisError: Redis unreachable (the next access tries again).
        """
        self.bind_namespace()
        return QueuePublisher(lambda name: self.queues.get(name) or self.queue(name))

    def publisher_if_running(self) -> QueuePublisher:
        """:attr:`publisher`, but never starting the embedded Redis (for commands that
        need the database only, and publish when they can: ``orders cancel``).

        Raises:
            QueueConnectionError: the embedded Redis of the data dir is not running.
            NamespaceClaimed / redis.RedisError: as :attr:`publisher`.
        """
        if (
            self.redis_override is None
            and not self.settings.redis_url
            and "redis" not in self.__dict__
            and not EmbeddedRedis(self.settings.resolved_data_dir()).is_running()
        ):
            raise QueueConnectionError(f"{self.redis_label()} is not running")
        return self.publisher

    @cached_property
    def publish_policy(self) -> PublishPolicy:
        """Attempts and backoff of outbox rows the queue refuses (from the settings)."""
        return PublishPolicy(
            max_attempts=self.settings.relay_publish_max_attempts,
            backoff_base_seconds=self.settings.relay_publish_backoff_seconds,
            backoff_max_seconds=self.settings.relay_publish_backoff_max_seconds,
        )

    def close(self) -> None:
        """Release connections (the embedded Redis server keeps running)."""
        if "redis" in self.__dict__ and self.redis_override is None:
            self.redis.close()
        if "engine" in self.__dict__ and self.engine_override is None:
            self.engine.dispose()


def build(settings: Settings | None = None, **overrides: object) -> App:
    """Build the application from ``settings`` (default: read from the environment).

    Args:
        settings: settings object; ``Settings()`` reads ``ORDERS_*`` variables.
        overrides: ``redis_override=`` / ``engine_override=`` parts to use instead,
            and the other :class:`App` fields (``pool_size``, ``lease_bound``...).
    """
    return App(settings or Settings(), **overrides)  # type: ignore[arg-type]


def build_worker_app(settings: Settings | None = None, *, lanes: int, **overrides: object) -> App:
    """Build the application of a worker process of ``lanes`` lanes (all steps together):
    one database connection per lane plus one (:func:`orders.app.db.worker_pool_size`)
    and no transaction of the process outliving its lease (``lease_bound``, ADR 0023).

    Args:
        settings: as for :func:`build`.
        lanes: lanes (threads) of the process, >= 1.
        overrides: as for :func:`build`.
    """
    return build(settings, pool_size=worker_pool_size(lanes), lease_bound=True, **overrides)
