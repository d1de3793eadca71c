"""``orders load-tpch`` and ``orders place``: input data and order placement."""

from __future__ import annotations

from typing import Annotated, Any

import redis
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from orders.app.pacing import place_paced
from orders.app.placement import PlaceResult
from orders.cli.context import console, emit_json, fail, handle_errors, make_app
from orders.cli.options import number_option
from orders.cli.render import for_terminal, say
from orders.sources.drafts import require_loaded
from reliable_queue import QueueError


@handle_errors
def load_tpch(
    scale: Annotated[
        float, number_option(min=0.001, max=1.0, help="TPC-H scale factor (0.01 = 15,000 orders).")
    ] = 0.01,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Generate TPC-H with tpchgen-cli and load customers, parts, stock and the order stream.

    Loading a database that already holds TPC-H data is a no-op. A run started
    while another loads the same data dir waits for it, then finds the data loaded.
    """
    from orders.sources.load_lock import WAITING_MESSAGE
    from orders.sources.tpch import load_tpch as load

    app = make_app(auto_migrate=True, uses_redis=False)
    with console.status(f"generating and loading TPC-H at scale {scale}...") as status:
        result = load(
            app.session_factory,
            app.settings.resolved_data_dir(),
            scale=scale,
            on_wait=lambda: status.update(WAITING_MESSAGE),
        )
    if as_json:
        emit_json(result.as_dict())
        return
    head = (
        f"loaded TPC-H at scale {result.scale:g}"
        if result.loaded
        else f"TPC-H (scale {result.scale:g}) was already loaded: nothing to do"
    )
    r = result
    say(
        f"{head}: {r.customers:,} customers, {r.products:,} products, {r.orders:,} orders, "
        f"{r.lines:,} lines"
    )


@handle_errors
def place(
    count: Annotated[
        int, typer.Option("--count", "-n", min=1, max=10_000_000, help="Orders to place.")
    ] = 100,
    rate: Annotated[
        float | None,
        number_option(
            min=0.1, max=100_000.0, help="Orders per second (default: as fast as possible)."
        ),
    ] = None,
    source: Annotated[
        str, typer.Option(help="tpch (the next orders of the stream) or random.")
    ] = "tpch",
    as_json: Annotated[
        bool, typer.Option("--json", help="JSON output (ids of the placed orders).")
    ] = False,
) -> None:
    """Place orders through the transactional outbox; their steps are published at once.

    Each order, its lines and its four step records are written in one
    transaction; running workers (`orders worker --all`) process them. A
    dropped database connection is retried with backoff (no order is placed
    twice: the database is asked whether the failed transaction committed). The
    command always ends by saying how many orders it committed: also on Ctrl-C
    (exit 130) and when the database stays unreachable (exit 1).
    """
    if source not in ("tpch", "random"):
        raise typer.BadParameter("use tpch or random", param_hint="--source")
    app = make_app()
    try:
        app.redis.ping()  # the queue must be reachable before any order is written
    except (redis.RedisError, QueueError) as exc:
        fail(f"Redis is not reachable ({exc}); nothing was placed")
    try:  # an empty catalog fails before the bar is drawn
        with app.session_factory() as session:
            require_loaded(session, source)
    except Exception:
        app.close()
        raise
    result = PlaceResult()
    columns = (TextColumn("placing"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console, disable=as_json) as bar:
            task = bar.add_task("place", total=count)

            def advance(batch: list[Any]) -> None:
                bar.advance(task, len(batch))

            place_paced(app, count, source=source, rate=rate, on_batch=advance, result=result)
    except KeyboardInterrupt:
        _report(result, as_json, stopped="interrupted")
        raise
    except Exception:
        _report(result, as_json, stopped="failed")
        raise
    finally:
        app.close()
    _report(result, as_json)


def _report(
    result: PlaceResult,
    as_json: bool,
    *,
    stopped: str | None = None,
) -> None:
    """What was committed, published and deferred; ``stopped`` says why it ended early
    (the error itself follows on stderr), and a batch whose commit the database could
    not confirm is named with the ids its orders have if it did."""
    if as_json:
        emit_json(
            {
                "order_ids": result.order_ids,
                "published_steps": result.published,
                "deferred_steps": result.deferred,
                "publish_error": result.publish_error,
                "reconnects": result.reconnects,
                "stopped": stopped,
                "uncertain_order_ids": result.uncertain,
            }
        )
        return
    ids = result.order_ids
    span = f"{ids[0]}..{ids[-1]}" if ids else "-"
    ended = f" before it was {stopped}" if stopped == "interrupted" else ""
    ended = ended or (" before the failure below" if stopped else "")
    console.print(
        f"placed {len(ids)} order(s) (ids {span}){ended}; published {result.published} step job(s)",
        highlight=False,
    )
    if result.uncertain:
        span = f"{result.uncertain[0]}..{result.uncertain[-1]}"
        console.print(
            f"{len(result.uncertain)} more order(s) (ids {span}) may have committed: the "
            "database did not say (`orders status ID` shows whether they exist)",
            highlight=False,
        )
    if result.reconnects:
        console.print(
            f"the database connection dropped {result.reconnects} time(s); each batch it "
            "hit was placed again after the database said it had not committed",
            highlight=False,
        )
    if result.deferred:
        reason = f" ({for_terminal(result.publish_error)})" if result.publish_error else ""
        console.print(
            f"[yellow]publishing of {result.deferred} step job(s) is deferred{reason}: the "
            "orders are committed and the outbox sweep of a running worker publishes them "
            "(`orders outbox list` shows rows the queue refused)[/]",
            highlight=False,
        )
