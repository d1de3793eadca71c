"""``orders web``: serve the dashboard."""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
from typing import Annotated

import typer

from orders.cli.context import (
    console,
    fail,
    handle_errors,
    load_settings,
    make_app,
    setup_logging,
)
from orders.cli.options import log_level_option
from orders.observability.urls import mask_url

log = logging.getLogger("orders.web")


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def bind_listening(host: str, port: int) -> socket.socket:
    """A TCP socket bound to ``host``:``port`` and listening, before anything says so.

    Args:
        host: an address or name of this machine.
        port: a TCP port (0: any free one; the socket's name says which).

    Returns:
        The listening socket (the caller closes it).

    Raises:
        typer.Exit(2): ``host`` is not an address of this machine (bad usage:
            the message names --host).
        typer.Exit(1): the port is in use or cannot be bound (the message names
            --port).
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except (socket.gaierror, UnicodeError) as exc:
        fail(f"--host {host} (ORDERS_WEB_HOST) is not an address: {exc.args[-1]}", code=2)
        raise  # not reached: fail exits
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            fail(f"port {port} on {host} is in use: choose another with --port (ORDERS_WEB_PORT)")
        if exc.errno == errno.EADDRNOTAVAIL:
            fail(f"--host {host} is not an address of this machine ({exc.strerror})", code=2)
        fail(f"cannot listen on {host}:{port} (--host / --port): {exc.strerror or exc}")
    return sock


@handle_errors
def web(
    host: Annotated[
        str | None,
        typer.Option(help="Address to bind (default ORDERS_WEB_HOST or 127.0.0.1)."),
    ] = None,
    port: Annotated[
        int | None,
        typer.Option(min=0, max=65535, help="TCP port (default ORDERS_WEB_PORT or 8080)."),
    ] = None,
    log_level: Annotated[str, log_level_option()] = "INFO",
) -> None:
    """Serve the web dashboard and the HTTP API (/api/v1): overview, queues, orders, dead
    letters, workers, search, audit, /metrics.

    Reading the dashboard is open to clients on this machine (loopback). Actions
    need a token whose role allows them: ORDERS_WEB_TOKEN (an admin, at least 16
    characters) or a named token (`orders tokens create NAME --role ROLE`); sign in
    on the page or send `Authorization: Bearer <token>`. With neither, every action
    is refused. The API always needs a bearer token; its OpenAPI document is at
    /api/v1/openapi.json. Requests must name this server
    as localhost, 127.0.0.1, ::1 or the bound address in their Host header;
    add other names with ORDERS_WEB_ALLOWED_HOSTS (comma separated).
    """
    import uvicorn

    from orders.web.app import create_app
    from orders.web.security import WeakToken, check_token
    from orders.web.settings import WebSettings

    setup_logging(log_level)
    settings = load_settings(WebSettings)
    bind = host or settings.host
    port = settings.port if port is None else port
    settings = settings.model_copy(update={"host": bind, "port": port})
    try:
        check_token(settings.token_value())
    except WeakToken as exc:
        fail(str(exc), code=2)
    sock = bind_listening(bind, port)  # before any "dashboard on" line, and before Redis
    try:
        app = make_app()
    except BaseException:
        sock.close()
        raise
    port = sock.getsockname()[1]
    redis_shown = mask_url(app.settings.redis_url) or "embedded"
    database_shown = mask_url(app.settings.resolved_database_url())
    actions = "need a token" if settings.token_value() else "need a named token (orders tokens)"
    console.print(
        f"dashboard on http://{bind}:{port}/, API on http://{bind}:{port}/api/v1 — Redis "
        f"{redis_shown}, database {database_shown}; actions {actions}",
        highlight=False,
    )
    if not _loopback(bind):
        log.warning(
            "listening on %s: clients not on this machine must sign in with the token to read, "
            "and the names they use for this server must be in ORDERS_WEB_ALLOWED_HOSTS",
            bind,
        )
    try:
        config = uvicorn.Config(
            create_app(app, settings),
            host=bind,
            port=port,
            log_config=None,
            log_level=log_level.lower(),
            access_log=log_level.upper() == "DEBUG",
        )
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
        app.close()
