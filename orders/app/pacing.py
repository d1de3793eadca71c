"""Placing orders at a target rate: batch sizes and pauses (pure pacing logic)."""

from __future__ import annotations

import time
from collections.abc import Callable

from orders.app.bootstrap import App
from orders.app.placement import PlacedOrder, PlaceResult, place


def batch_size_for(rate: float | None, *, ceiling: int = 500) -> int:
    """Orders per transaction: about a tenth of a second's worth at ``rate`` orders/s.

    Args:
        rate: orders per second, or None for "as fast as possible".
        ceiling: the largest batch.
    """
    if rate is None:
        return ceiling
    return max(1, min(ceiling, int(rate / 10)))


def place_paced(
    app: App,
    count: int,
    *,
    source: str = "tpch",
    rate: float | None = None,
    on_batch: Callable[[list[PlacedOrder]], None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    result: PlaceResult | None = None,
) -> PlaceResult:
    """Place ``count`` orders through the outbox, publishing each batch after its commit.

    Args:
        app: the application.
        count: orders to place.
        source: ``tpch`` or ``random``.
        rate: orders per second at most (None: unpaced).
        on_batch: progress callback with each committed batch.
        clock / sleep: injected for tests (seconds); ``sleep`` also waits the
            backoff before a batch whose database connection dropped is retried.
        result: where to record what was placed (default: a new one): the caller's
            object holds every committed order also when this raises.

    Returns:
        ``result``.

    Raises:
        StreamNotLoaded / UnknownSource / PlacementUncertain / sqlalchemy errors /
            KeyboardInterrupt: see ``orders.app.placement.place``.
    """
    size = batch_size_for(rate)
    total = result if result is not None else PlaceResult()
    started = clock()
    placed = 0
    while placed < count:
        n = min(size, count - placed)
        place(
            app.session_factory,
            n,
            source=source,
            batch_size=n,
            publisher=app.publisher,
            on_batch=on_batch,
            policy=app.publish_policy,
            result=total,
            sleep=sleep,
            tracer=app.tracer("orders.placement"),
        )
        placed += n
        if rate:
            ahead = placed / rate - (clock() - started)
            if ahead > 0:
                sleep(ahead)
    return total
