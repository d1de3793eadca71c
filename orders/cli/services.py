"""``orders services`` and ``orders db``: the embedded Redis server and migrations."""

from __future__ import annotations

from typing import Annotated

import typer

from orders.app.private_files import private_dir
from orders.app.settings import Settings
from orders.cli.context import console, emit_json, fail, handle_errors, load_settings
from orders.cli.render import say
from orders.observability.urls import mask_url
from reliable_queue.embedded import EmbeddedRedis

services = typer.Typer(help="The embedded Redis server of the data dir.", no_args_is_help=True)
db = typer.Typer(help="Database schema (Alembic migrations).", no_args_is_help=True)


@services.command()
@handle_errors
def start() -> None:
    """Start the embedded Redis server (AOF everysec) if it is not running."""
    settings = load_settings(Settings)
    if settings.redis_url:
        console.print("ORDERS_REDIS_URL is set: the embedded server is not used")
        return
    private_dir(settings.resolved_data_dir())
    server = EmbeddedRedis(settings.resolved_data_dir(), tcp=settings.embedded_redis_tcp)
    url = mask_url(server.ensure_running())
    tcp = f", TCP {mask_url(server.tcp_url)}" if server.tcp_url else ""
    console.print(f"embedded Redis running at {url}{tcp} (pid {server.pid})", highlight=False)


@services.command()
@handle_errors
def stop() -> None:
    """Stop the embedded Redis server of the data dir (its AOF keeps the data)."""
    server = EmbeddedRedis(load_settings(Settings).resolved_data_dir())
    if server.stop():
        say("stopped (the next orders command that needs Redis starts it again)")
    else:
        say("not running")


@services.command()
@handle_errors
def status(as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False) -> None:
    """Say whether the embedded Redis server runs, where, and with which pid, and which
    Redis and database URLs are configured (passwords masked)."""
    settings = load_settings(Settings)
    server = EmbeddedRedis(settings.resolved_data_dir())
    info = {
        "redis_url_configured": bool(settings.redis_url),
        "redis_url": mask_url(settings.redis_url),
        "database_url": mask_url(settings.resolved_database_url()),
        "embedded_running": server.is_running(),
        "embedded_url": mask_url(server.url),
        "embedded_tcp_url": mask_url(server.tcp_url),
        "embedded_pid": server.pid,
        "data_dir": str(settings.resolved_data_dir()),
    }
    if as_json:
        emit_json(info)
        return
    if settings.redis_url:
        say("Redis: {} (ORDERS_REDIS_URL)", info["redis_url"])
    else:
        running = (
            f"running at {server.url} (pid {server.pid})"
            if info["embedded_running"]
            else ("not running (the next orders command that needs Redis starts it)")
        )
        say("Redis: the embedded server of the data dir, {}", running)
    say("database: {}", info["database_url"])
    say("data dir: {}", info["data_dir"])


@db.command()
@handle_errors
def upgrade(revision: Annotated[str, typer.Argument(help="Target revision.")] = "head") -> None:
    """Apply migrations up to REVISION (default head)."""
    from alembic.util.exc import CommandError

    from orders.app.migrate import upgrade_database

    settings = load_settings(Settings)
    settings.resolved_data_dir().mkdir(parents=True, exist_ok=True)
    try:
        upgrade_database(settings.resolved_database_url(), revision)
    except CommandError as exc:  # an unknown or malformed revision
        fail(f"cannot upgrade to {revision!r}: {exc}", code=2)
    say("database at {}", revision)


@db.command("rebind-redis")
@handle_errors
def rebind_redis(
    yes: Annotated[
        bool, typer.Option("--yes", help="Really delete the namespace's keys (no prompt).")
    ] = False,
) -> None:
    """Bind the Redis namespace (ORDERS_QUEUE_PREFIX) to this database, deleting its keys.

    For a namespace that another database used (a deleted orders.db whose
    embedded Redis kept its data, or two databases pointed at one Redis): the
    other database's jobs, dead letters and idempotency keys are deleted, then
    this database's outbox sweep publishes its open steps again.
    """
    from orders.app.namespace import rebind_namespace
    from orders.cli.context import make_app

    app = make_app()
    prefix = app.settings.queue_prefix
    if not yes:
        typer.confirm(
            f"delete every key of namespace {prefix!r} on {app.redis_label()}?", abort=True
        )
    try:
        deleted = rebind_namespace(app.redis, prefix, app.database_label)
        from orders.cli.context import audit_row

        audit_row(app, "rebind", {"namespace": prefix}, count=deleted)
    finally:
        app.close()
    console.print(f"deleted {deleted} key(s); namespace {prefix!r} now belongs to this database")
