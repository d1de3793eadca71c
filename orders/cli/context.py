"""Shared pieces of the CLI: building the app, printing, turning errors into exits.

Rich (``orders.cli.render``) is imported on first print, not here: a worker process
prints nothing on the terminal unless it fails, and importing it is start-up CPU.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import redis
import typer
from pydantic import ValidationError
from pydantic_settings import BaseSettings
from redis.exceptions import RedisClusterException
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError

from orders.app.bootstrap import App, build, build_worker_app
from orders.app.errors import InvalidRedisUrl
from orders.app.settings import Settings
from orders.domain.errors import OrdersError
from orders.observability.urls import mask_url, mask_urls_in, remember_url
from reliable_queue import (
    JobIdLookupError,
    JobIdTooShortError,
    QueueConnectionError,
    QueueError,
    QueueLimitError,
)
from reliable_queue.errors import InvalidTextError

if TYPE_CHECKING:
    from orders.cli.render import console, err_console

__all__ = [
    "console",
    "emit_json",
    "err_console",
    "fail",
    "handle_errors",
    "load_settings",
    "make_app",
]

F = TypeVar("F", bound=Callable[..., Any])


def __getattr__(name: str) -> Any:
    """``console`` and ``err_console`` (``orders.cli.render``), imported when first asked for."""
    if name in ("console", "err_console"):
        from orders.cli import render

        return getattr(render, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


#: Largest id a row can have: a 64-bit signed integer (SQLite INTEGER, PostgreSQL
#: BIGINT). Id arguments are bounded by it so that a larger number is refused as bad
#: usage (exit 2) instead of overflowing in the database driver.
ROW_ID_MAX = 2**63 - 1


def make_app(
    *, auto_migrate: bool = False, uses_redis: bool = True, worker_lanes: int | None = None
) -> App:
    """Build the application from ``ORDERS_*`` environment variables.

    Args:
        auto_migrate: bring a configured database to the newest migration on first use.
        uses_redis: the command talks to Redis: when the embedded server is not
            running (say, after ``orders services stop``), say on stderr that it
            is started again.
        worker_lanes: the command is a worker process with this many lanes: its
            application is built for one (``orders.app.bootstrap.build_worker_app``).

    Tracing is on when ``ORDERS_TRACES`` / ``OTEL_*`` say so
    (``orders.observability.tracing``); a bad value is one warning, never a failure.

    Raises:
        typer.Exit(2): the settings are invalid (the message says which).
    """
    settings = load_settings(Settings)
    if uses_redis:
        _say_if_starting_redis(settings)
    from orders.observability.tracing import tracer_provider

    provider = tracer_provider(settings.resolved_data_dir())  # None: tracing is off
    if worker_lanes is not None:
        return build_worker_app(
            settings, lanes=worker_lanes, auto_migrate=auto_migrate, tracer_provider=provider
        )
    return build(settings, auto_migrate=auto_migrate, tracer_provider=provider)


S = TypeVar("S", bound=BaseSettings)


def load_settings(kind: type[S]) -> S:
    """Read settings of class ``kind`` from the environment, or exit 2 naming each bad variable.

    Args:
        kind: a pydantic-settings class (``Settings``, ``WebSettings``).

    Returns:
        The settings object.

    Raises:
        typer.Exit(2): a variable is invalid (the message names it and says why).
    """
    try:
        settings = kind()
    except ValidationError as exc:
        prefix = str(kind.model_config.get("env_prefix") or "")
        problems = "; ".join(
            f"{prefix}{'_'.join(str(p) for p in e['loc']).upper()}: "
            + str(e["msg"]).removeprefix("Value error, ")
            for e in exc.errors()
        )
        fail(f"invalid settings: {problems}", code=2)
        raise  # unreachable
    for name in ("redis_url", "database_url"):  # masked in every text from now on
        remember_url(getattr(settings, name, None))
    if isinstance(settings, Settings):
        _loaded.append(settings)  # what an error line says the command used
    return settings


#: The application settings this command loaded (the last one counts): an error line
#: names the setting in use from them, not from a second reading of the environment.
_loaded: list[Settings] = []


def _say_if_starting_redis(settings: Settings) -> None:
    """Say so on stderr when this command is about to start the embedded Redis."""
    if settings.redis_url:
        return
    from reliable_queue.embedded import EmbeddedRedis

    if not EmbeddedRedis(settings.resolved_data_dir()).is_running():
        from rich.text import Text

        from orders.cli.render import err_console

        err_console.print(
            Text(
                "the embedded Redis of the data dir is not running: starting it "
                "(it keeps running; `orders services stop` stops it)",
                style="dim",
            ),
            highlight=False,
        )


def fail(message: str, code: int = 1) -> None:
    """Print ``error: message`` to stderr and exit with ``code``."""
    from rich.text import Text

    from orders.cli.render import clean, err_console

    line = Text("error: ", style="bold red")
    line.append(clean(mask_urls_in(message)))
    err_console.print(line, highlight=False, soft_wrap=True)
    raise typer.Exit(code)


def emit_json(value: Any) -> None:
    """Print ``value`` as JSON on stdout (datetimes and other objects via str)."""
    sys.stdout.write(json.dumps(value, indent=2, default=str) + "\n")


def _setting(variable: str, unset: str) -> str:
    """``VARIABLE=value`` (masked) of the loaded settings, or ``VARIABLE unset: ...``."""
    field = variable.removeprefix("ORDERS_").lower()
    value = getattr(_loaded[-1], field, None) if _loaded else None
    if field == "data_dir" and value is not None and "data_dir" not in _loaded[-1].model_fields_set:
        value = None  # the default, not something the user set
    return f"{variable}={mask_url(str(value))}" if value else f"{variable} unset: {unset}"


def _redis_problem(exc: BaseException) -> str:
    where = _setting("ORDERS_REDIS_URL", "the embedded server of the data dir")
    return f"cannot use Redis ({where}): {_first_line(exc)}"


def _database_problem(exc: BaseException) -> str:
    where = _setting("ORDERS_DATABASE_URL", "the SQLite file of the data dir")
    cause = getattr(exc, "orig", None) or exc
    return f"cannot use the database ({where}): {_first_line(cause)}"


def _os_problem(exc: OSError) -> str:
    """The line for a file error, naming the setting whose path it is about
    (``ORDERS_DATABASE_URL`` for a SQLite file, else ``ORDERS_DATA_DIR``)."""
    if exc.filename is None:
        return _first_line(exc)
    path = os.path.normpath(os.fsdecode(exc.filename))

    def within(root: str) -> bool:
        root = os.path.normpath(root)
        return path == root or root.startswith(path + os.sep) or path.startswith(root + os.sep)

    database = (_loaded[-1].database_url or "") if _loaded else ""
    if database.startswith("sqlite") and "///" in database:
        if within(database.split("///", 1)[1].split("?", 1)[0]):
            return _database_problem(exc)
    where = _setting("ORDERS_DATA_DIR", "the default data dir")
    return f"cannot use the data dir ({where}): {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{exc.__class__.__name__}: {lines[0] if lines else ''}".rstrip(": ")


#: What a command raises to end itself (an exit, bad usage, a declined confirmation):
#: typer's own classes; click's too once click is loaded (:func:`_cli_exits`).
_TYPER_EXITS: tuple[type[BaseException], ...] = (typer.Exit, typer.Abort, typer.TyperException)


def _cli_exits() -> tuple[type[BaseException], ...]:
    """typer's exit classes, and click's when click is imported (typer carries its own
    copy of click; the package itself is imported only by what uses it, and an
    exception of a module never imported cannot be raised)."""
    click = sys.modules.get("click")
    if click is None:
        return _TYPER_EXITS
    return (*_TYPER_EXITS, click.exceptions.Exit, click.ClickException, click.Abort)


def handle_errors(func: F) -> F:
    """Decorator: known failures print one line and exit with a documented status.

    Exit statuses: 1 a failure (the line names the service and its setting:
    Redis -> ``ORDERS_REDIS_URL``, database -> ``ORDERS_DATABASE_URL``), 2 bad
    usage (a text argument UTF-8 cannot encode, a number past a library bound
    included), 130 interrupted (Ctrl-C). Unknown exceptions keep their traceback,
    printed through the masker like every other error text, and exit 1.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except KeyboardInterrupt:
            from orders.cli.render import err_console

            err_console.print("interrupted", highlight=False)
            raise typer.Exit(130) from None
        except (JobIdTooShortError, InvalidTextError, QueueLimitError) as exc:  # bad usage
            fail(str(exc), code=2)
        except JobIdLookupError as exc:
            fail(str(exc))
        except (QueueConnectionError, redis.ConnectionError, redis.TimeoutError) as exc:
            fail(_redis_problem(exc))
        except InvalidRedisUrl as exc:  # a setting: bad usage, like the others
            fail(str(exc), code=2)
        except (QueueError, OrdersError) as exc:
            fail(str(exc))
        except (redis.RedisError, RedisClusterException) as exc:
            fail(_redis_problem(exc))
        except (OperationalError, InterfaceError) as exc:
            fail(_database_problem(exc))
        except SQLAlchemyError as exc:
            fail(f"database error: {_first_line(exc)}")
        except UnicodeEncodeError as exc:
            fail(
                f"cannot print in the output encoding ({exc.encoding}); set PYTHONIOENCODING=utf-8"
            )
        except OSError as exc:
            fail(_os_problem(exc))
        except Exception as exc:
            if isinstance(exc, _cli_exits()):
                raise  # the command's own exit, bad usage, a declined confirmation
            print_traceback(exc)  # a bug: its traceback, masked, never a secret
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def print_traceback(exc: BaseException) -> None:
    """Print ``exc``'s traceback on stderr with secrets masked and control characters
    shown as escapes (the one path an unexpected error takes to the terminal)."""
    from rich.text import Text

    from orders.cli.render import clean, err_console

    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    err_console.print(
        Text(clean(mask_urls_in("".join(lines)), multiline=True)),
        highlight=False,
        soft_wrap=True,
    )


def setup_logging(level: str = "INFO") -> None:
    """Structured logs on stderr: JSON lines when stderr is not a terminal, readable
    lines when it is; each line about a job carries its id, task, attempt and order
    id, and credentials in URLs are masked (see ``orders.observability.logs``)."""
    import logging

    from orders.observability.logs import configure_logging

    configure_logging(level, stream=sys.stderr)
    if logging.getLevelName(level.upper()) != logging.DEBUG:
        # Alembic's INFO lines ("Context impl SQLiteImpl.", ...) on every start say nothing.
        logging.getLogger("alembic").setLevel(logging.WARNING)


def audit_row(
    app: App,
    action: str,
    target: dict[str, Any],
    *,
    count: int,
    dry_run: bool = False,
    result: str = "ok",
) -> None:
    """Write the ``operator_actions`` row of a CLI action whose effect is done (in Redis:
    redrive, purge, pause, resume, limit, rebind), in a transaction of its own, with the
    OS user as the actor (``orders.app.audit``).

    Args:
        app: the command's application (its database).
        action: an ``orders.app.audit.Action`` value.
        target: the filter or ids acted on (JSON-able, no secret).
        count: how many it acted on (or would).
        dry_run: it only listed.
        result: ``ok`` or ``failed: ...``.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database failed (the action itself is done).
    """
    from orders.app.audit import os_actor, record_now

    record_now(
        app.session_factory,
        os_actor(),
        action,
        target,
        count=count,
        dry_run=dry_run,
        result=result,
    )
