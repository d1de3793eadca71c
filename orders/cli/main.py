"""The ``orders`` command: one Typer app composed of small command modules."""

from __future__ import annotations

import typer

from orders.app.private_files import restrict_umask
from orders.cli.chaos import chaos
from orders.cli.data import load_tpch, place
from orders.cli.demo import demo
from orders.cli.dlq import dlq
from orders.cli.explain import explain
from orders.cli.inject import inject
from orders.cli.outbox import outbox
from orders.cli.queue_audit import queue_cli
from orders.cli.services import db, services
from orders.cli.status import status
from orders.cli.watch import watch
from orders.cli.web import web
from orders.cli.worker import worker

app = typer.Typer(
    name="orders",
    help="orderflow: order workflows (stock, notification, points, logistics) "
    "on a reliable Redis queue.\n\n"
    "Start with `orders demo`. Settings come from ORDERS_* environment variables "
    "(ORDERS_REDIS_URL, ORDERS_DATABASE_URL, ORDERS_DATA_DIR, ...); unset, an embedded Redis "
    "and a SQLite file under ./.data are used.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _private_files() -> None:
    """Every file an ``orders`` command creates is its owner's alone (umask 077)."""
    restrict_umask()


app.command()(demo)
app.command()(chaos)
app.command("load-tpch")(load_tpch)
app.command()(place)
app.command()(worker)
app.command()(status)
app.command()(watch)
app.command()(web)
app.command()(inject)
app.command()(explain)
app.add_typer(dlq, name="dlq")
app.add_typer(outbox, name="outbox")
app.add_typer(queue_cli, name="queue")
app.add_typer(services, name="services")
app.add_typer(db, name="db")

if __name__ == "__main__":
    app()
