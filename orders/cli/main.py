"""The ``orders`` command: one Typer app whose subcommands are imported on first use.

``orders --help`` and ``orders status`` must not pay for SQLAlchemy, the chaos
machinery or the web stack of commands they do not run. So this module imports
no command module: :data:`COMMANDS` names each subcommand, where it lives
(``"module:attribute"``) and its one-line help, and :class:`LazyGroup` imports
a module only when its command is run or its own ``--help`` is asked for.

Adding a command: write ``orders/cli/<name>.py`` holding a Typer command
function (or a ``typer.Typer()`` group), then add one :class:`Entry` to
:data:`COMMANDS` with its one-line help (``tests/unit/test_cli_startup.py``
checks that the line matches the command's own help and that nothing heavy is
imported by ``orders --help``).
"""

from __future__ import annotations

import gc
import importlib
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperGroup


@dataclass(frozen=True)
class Entry:
    """One subcommand of ``orders``.

    Attributes:
        name: the command name typed by the user (``dlq``, ``load-tpch``).
        target: ``"module:attribute"``; the attribute is a Typer command function
            or a ``typer.Typer`` group.
        help: the one-line help shown by ``orders --help`` (the first line of the
            command's own help, kept here so that listing imports nothing).
    """

    name: str
    target: str
    help: str


COMMANDS: tuple[Entry, ...] = (
    Entry(
        "demo",
        "orders.cli.demo:demo",
        "Run TPC-H orders through stock, notification, points and logistics, "
        "with failures injected.",
    ),
    Entry(
        "chaos",
        "orders.cli.chaos:chaos",
        "Place orders while killing workers and Redis, then prove from the database "
        "that no order was lost and no effect was applied twice.",
    ),
    Entry(
        "load-tpch",
        "orders.cli.data:load_tpch",
        "Generate TPC-H with tpchgen-cli and load customers, parts, stock and the order stream.",
    ),
    Entry(
        "place",
        "orders.cli.data:place",
        "Place orders through the transactional outbox; their steps are published at once.",
    ),
    Entry("cancel", "orders.cli.cancel:cancel", "Cancel ORDER_ID until its order completes."),
    Entry(
        "search",
        "orders.cli.search:search",
        "Find orders (or step jobs, --jobs) by status, customer, step, step state, DLQ "
        "reason, error text and placement time, newest first, from the database.",
    ),
    Entry(
        "worker",
        "orders.cli.worker:worker",
        "Run a worker for STEP... (or --all) until SIGTERM / Ctrl-C.",
    ),
    Entry(
        "status",
        "orders.cli.status:status",
        "Show ORDER_ID's steps (state, attempts, last error, times, job ids), or the overview: "
        "orders by status, steps by state, queue depths, DLQ sizes, the worker processes (lanes "
        "busy, what they run, the gone ones), paused queues (who, why, since) and injected "
        "faults.",
    ),
    Entry(
        "watch",
        "orders.cli.watch:watch",
        "Watch the system live: per step ready / delayed / active / dead, jobs/s over 10 s, "
        "p50/p95 handler time, retries per minute, paused queues; orders placed / in progress / "
        "completed / blocked; the newest dead letters; the worker processes.",
    ),
    Entry(
        "web",
        "orders.cli.web:web",
        "Serve the web dashboard and the HTTP API (/api/v1): overview, queues, orders, dead "
        "letters, workers, search, audit, /metrics.",
    ),
    Entry(
        "trace",
        "orders.cli.trace:trace",
        "Show ORDER_ID's trace: every span from its placement to its last attempt, as a tree "
        "on a time axis.",
    ),
    Entry(
        "inject",
        "orders.cli.inject:inject",
        "Inject failures into STEP; running workers pick them up within a second.",
    ),
    Entry(
        "explain",
        "orders.cli.explain:explain",
        "Show one job: state, queue, attempts, lease owner and deadline, next retry time, "
        "idempotency key, DLQ reason and last failure.",
    ),
    Entry(
        "dlq",
        "orders.cli.dlq:dlq",
        "Dead-letter queues of the step queues: list, show, redrive, purge.",
    ),
    Entry(
        "outbox",
        "orders.cli.outbox:outbox",
        "Outbox rows the queue refused: list them (with attempts, next try and reason), "
        "retry the ones given up.",
    ),
    Entry(
        "queue",
        "orders.cli.queue_audit:queue_cli",
        "Checks and flow control of the step queues: audit, pause, resume, limit, cap.",
    ),
    Entry(
        "tokens",
        "orders.cli.tokens:tokens",
        "Named API tokens with roles (viewer, placer, operator, admin): create, list, revoke.",
    ),
    Entry(
        "audit",
        "orders.cli.audit:audit",
        "Show the operator actions, newest first: who (token name or OS user), what, on "
        "which filter or ids, dry run or not, how many, the result and the request id.",
    ),
    Entry("services", "orders.cli.services:services", "The embedded Redis server of the data dir."),
    Entry("db", "orders.cli.services:db", "Database schema (Alembic migrations)."),
)
"""Every subcommand, in the order ``orders --help`` lists them."""

EXIT_CODES = (
    "Exit status: 0 success; 1 the command failed (a service unreachable, a job not found, "
    "an invariant broken); 2 bad usage or invalid settings; 130 interrupted (Ctrl-C)."
)


def load(entry: Entry) -> Any:
    """Import ``entry.target`` and turn it into a click command named ``entry.name``.

    Returns:
        A click command (a group for a ``typer.Typer`` target).

    Raises:
        ImportError / AttributeError: the target does not exist (a wrong table entry).
    """
    module_name, attribute = entry.target.split(":")
    obj = getattr(importlib.import_module(module_name), attribute)
    if isinstance(obj, typer.Typer):
        command = typer.main.get_group(obj)
    else:
        single = typer.Typer(rich_markup_mode="markdown", add_completion=False)
        single.command(entry.name)(obj)
        command = typer.main.get_command(single)
    command.name = entry.name
    _tidy_help(command)
    return command


def _no_type(ctx: Any) -> None:
    return None


def _tidy_help(command: Any) -> None:
    """Help shows ``JOB_ID`` (not ``{job_id}``) for arguments and no ``<bool>`` on flags."""
    for param in command.params:
        if getattr(param, "is_flag", False):
            param.display_type_rich = _no_type
        elif param.param_type_name == "argument" and param.metavar is None:
            param.metavar = name = param.name.upper()
            if param.required:
                param._usage_display_name = lambda name=name: name
    help_option = command.get_help_option

    def get_help_option(ctx: Any) -> Any:
        option = help_option(ctx)
        if option is not None:
            option.display_type_rich = _no_type
        return option

    command.get_help_option = get_help_option
    for sub in getattr(command, "commands", {}).values():
        _tidy_help(sub)


class LazyGroup(TyperGroup):
    """A Typer group whose subcommands come from :data:`COMMANDS`, imported on first use.

    Listing (``orders --help``) shows each entry's one-line help without importing it.
    """

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._entries = {e.name: e for e in COMMANDS}
        self._loaded: dict[str, Any] = {}
        self._listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        """Names in table order."""
        return list(self._entries)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """The command ``cmd_name`` (imported now), or a help-only stand-in while listing."""
        entry = self._entries.get(cmd_name)
        if entry is None:
            return None
        if self._listing:
            return typer.core.TyperCommand(name=entry.name, short_help=entry.help)
        if cmd_name not in self._loaded:
            self._loaded[cmd_name] = load(entry)
        return self._loaded[cmd_name]

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """Help of ``orders`` itself: the command list from the table, nothing imported."""
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="orders",
    cls=LazyGroup,
    help="orderflow: order workflows (stock, notification, points, logistics) "
    "on a reliable Redis queue.\n\n"
    "Start with `orders demo`. Settings come from ORDERS_* environment variables "
    "(ORDERS_REDIS_URL, ORDERS_DATABASE_URL, ORDERS_DATA_DIR, ...); unset, an embedded Redis "
    "and a SQLite file under ./.data are used.",
    epilog=EXIT_CODES,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # Plain click help for ``orders --help`` itself: Rich's help renderer alone costs
    # more start-up time than the 0.3 s of CPU the command may take.
    rich_markup_mode=None,
    add_completion=False,
)


#: :func:`main` paused the cyclic garbage collector; the group callback resumes it
_gc_paused = False


def _resume_gc() -> None:
    """Resume the collector paused by :func:`main`, the objects made meanwhile frozen."""
    global _gc_paused
    if _gc_paused:
        _gc_paused = False
        gc.freeze()
        gc.enable()


def main() -> None:
    """The ``orders`` console script (and ``python -m orders.cli.main``): :data:`app`,
    with the cyclic garbage collector paused while the command's module is imported.

    Importing makes some 100,000 long-lived objects (modules, classes, functions) and
    almost no garbage, yet collections on the way, and the first one after, traverse
    them. So collection is paused, and resumed with those objects frozen
    (``gc.freeze()``: out of the collector's reach, still freed by reference counting)
    by the group callback, before the command itself runs, or by the end of this call.
    A cycle that became garbage while paused is never collected (a few dozen objects).
    Importing this module pauses nothing (tests run :data:`app` in their own process).
    """
    global _gc_paused
    if gc.isenabled():
        gc.disable()
        _gc_paused = True
    try:
        app()
    finally:
        _resume_gc()


@app.callback()
def _private_files() -> None:
    """Every file an ``orders`` command creates is its owner's alone (umask 077), and an
    error nothing caught is printed with its secrets masked."""
    _resume_gc()  # paused by main() while the command's module was imported
    from orders.app.private_files import restrict_umask
    from orders.observability.urls import install_excepthooks

    restrict_umask()
    install_excepthooks()


if __name__ == "__main__":
    main()
