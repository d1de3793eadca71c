"""Middleware that sees every job, whether its task takes jobs one at a time or in batches.

A plain middleware, ``middleware(ctx, payload, call_next) -> result``, wraps one
handler call. A batch task's handler takes every job of a fetched batch in ONE
call, which a per-call wrapper cannot take apart: timing, per-job metrics and
per-job fault injection would silently skip those jobs. A
:class:`BatchMiddleware` is written once, over a list of jobs
(:meth:`BatchMiddleware.around`), and wraps both kinds: a single job runs
through it as a batch of one. A worker serving batch tasks takes only
:class:`BatchMiddleware` (``Worker`` refuses a plain one rather than bypass it).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .job import JobContext

#: ``[(payload, ctx), ...]``: the jobs of one call, as a batch handler takes them.
Items = list[tuple[Any, JobContext]]
#: one entry per item, in the same order: None (succeeded) or the item's exception.
Results = list[BaseException | None]
#: runs the rest of the chain (inner middleware, then the handler) on some items.
CallNext = Callable[[Items], Results]


class BatchMiddleware:
    """Base of middleware that wraps single jobs and batches alike.

    Subclasses implement :meth:`around`. An instance is also a plain middleware
    (``instance(ctx, payload, call_next)``), so the same object goes into the
    worker's ``middleware`` list for every kind of task.
    """

    def around(self, items: Items, call_next: CallNext) -> Results:
        """Run ``call_next`` on the items (or a subset), doing this middleware's work per job.

        Args:
            items: ``[(payload, ctx), ...]``, one or more jobs of one task.
            call_next: runs the rest of the chain on a list of items and returns
                their results in the same order; call it at most once.

        Returns:
            One entry per item of ``items``: None, or the exception that item
            fails with (an item left out of ``call_next`` must get its exception
            here, e.g. an injected failure). :func:`call_rest` does the bookkeeping.
        """
        raise NotImplementedError

    def __call__(self, ctx: JobContext, payload: Any, call_next: Callable[[], Any]) -> Any:
        """Wrap one handler call: :meth:`around` with a batch of one.

        Returns:
            The handler's result.

        Raises:
            Exception: the handler's exception, or the one this middleware gave the job.
        """
        returned: list[Any] = []

        def inner(items: Items) -> Results:
            if not items:
                return []
            try:
                returned.append(call_next())
            except Exception as exc:  # handed back to around(), raised below
                return [exc]
            return [None]

        [error] = self.around([(payload, ctx)], inner)
        if error is not None:
            raise error
        return returned[0] if returned else None


def call_rest(items: Items, errors: Results, call_next: CallNext) -> Results:
    """Run ``call_next`` on the items whose ``errors`` entry is None and fill in their results.

    Args:
        items: the jobs given to ``around``.
        errors: one entry per item; the items already failed hold their exception.
        call_next: the ``call_next`` given to ``around``.

    Returns:
        ``errors``, completed in place.

    Raises:
        RuntimeError: ``call_next`` returned the wrong number of results.
    """
    keep = [i for i, error in enumerate(errors) if error is None]
    if not keep:
        return errors
    results = call_next([items[i] for i in keep])
    if len(results) != len(keep):
        raise RuntimeError(f"{len(results)} results for {len(keep)} jobs")
    for i, result in zip(keep, results, strict=True):
        errors[i] = result
    return errors


def call_batch(
    handler: Callable[[Items], Sequence[BaseException | None]],
    items: Items,
    middleware: Sequence[Any],
) -> Results:
    """Run a batch handler on ``items`` through ``middleware``, outermost first.

    Args:
        handler: the batch handler, ``handler(items) -> [error | None, ...]``.
        items: ``[(payload, ctx), ...]``.
        middleware: :class:`BatchMiddleware` instances.

    Returns:
        One entry per item: None or its exception.

    Raises:
        TypeError: a middleware is not a :class:`BatchMiddleware`.
        Exception: whatever the handler or a middleware raises for the call as a whole.
    """
    plain = [m for m in middleware if not isinstance(m, BatchMiddleware)]
    if plain:
        raise TypeError(f"middleware {plain[0]!r} cannot wrap a batch task's jobs")

    def at(level: int, chosen: Items) -> Results:
        if not chosen:
            return []
        if level == len(middleware):
            return list(handler(chosen))
        return middleware[level].around(chosen, lambda rest: at(level + 1, rest))

    return at(0, items)


__all__ = ["BatchMiddleware", "CallNext", "Items", "Results", "call_batch", "call_rest"]
