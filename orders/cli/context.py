"""Shared pieces of the CLI: building the app, printing, turning errors into exits."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import redis
import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from sqlalchemy.exc import SQLAlchemyError

from orders.app.bootstrap import App, build
from orders.app.settings import Settings
from orders.domain.errors import OrdersError
from orders.observability.urls import mask_urls_in
from reliable_queue import QueueError

console = Console()
err_console = Console(stderr=True)

F = TypeVar("F", bound=Callable[..., Any])


def make_app(*, auto_migrate: bool = False) -> App:
    """Build the application from ``ORDERS_*`` environment variables.

    Args:
        auto_migrate: bring a configured database to the newest migration on first use.

    Raises:
        typer.Exit(2): the settings are invalid (the message says which).
    """
    try:
        return build(Settings(), auto_migrate=auto_migrate)
    except ValidationError as exc:
        problems = "; ".join(
            f"ORDERS_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}" for e in exc.errors()
        )
        fail(f"invalid settings: {problems}", code=2)
        raise  # unreachable


def fail(message: str, code: int = 1) -> None:
    """Print ``error: message`` to stderr and exit with ``code``."""
    err_console.print(f"[bold red]error:[/] {escape(mask_urls_in(message))}", highlight=False)
    raise typer.Exit(code)


def emit_json(value: Any) -> None:
    """Print ``value`` as JSON on stdout (datetimes and other objects via str)."""
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def handle_errors(func: F) -> F:
    """Decorator: known failures print one clear line and exit 1 (no traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (QueueError, OrdersError) as exc:
            fail(str(exc))
        except redis.RedisError as exc:  # includes a cluster that cannot be reached
            fail(f"Redis error: {exc.__class__.__name__}: {exc}")
        except SQLAlchemyError as exc:
            fail(f"database error: {exc.__class__.__name__}: {str(exc).splitlines()[0]}")
        except OSError as exc:
            fail(f"{exc.__class__.__name__}: {exc}")

    return wrapper  # type: ignore[return-value]


def setup_logging(level: str = "INFO") -> None:
    """Structured logs on stderr: JSON lines when stderr is not a terminal, readable
    lines when it is; each line about a job carries its id, task, attempt and order
    id, and credentials in URLs are masked (see ``orders.observability.logs``)."""
    from orders.observability.logs import configure_logging

    configure_logging(level, stream=sys.stderr)
