"""One handler call of an isolated task, through the worker's middleware and the child."""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import TimeLimitExceeded
from ..execution import Middleware, Outcome, Prepared, run_batch_call, run_single_call
from ..job import JobContext
from .parent import ChildProcess, Finished, Killed, Lost


@dataclass(slots=True)
class IsolatedRun:
    """What one isolated call came to.

    Attributes:
        outcomes: one per item, as :func:`~reliable_queue.execution.run_prepared` /
            ``run_batch`` give them (the middleware saw the call's error when it
            was stopped).
        stopped: how the child's call ended when it did not finish (None: it did).
        ran: positions of the items the child's call carried (the middleware may
            have failed some before it).
    """

    outcomes: list[Outcome]
    stopped: Killed | Lost | None = None
    ran: list[int] = field(default_factory=list)


def run_isolated(
    child: ChildProcess,
    items: Sequence[Prepared],
    deadline: float | None,
    rng: random.Random | None,
    middleware: Sequence[Middleware],
) -> IsolatedRun:
    """Run ``items`` (one job, or the jobs of one batch task) in ``child``.

    The middleware runs here, around a stand-in handler that sends the call to the
    child (:meth:`ChildProcess.call`); what it sees is what a handler in a thread
    would give, with :class:`~reliable_queue.errors.TimeLimitExceeded` or the child's
    :class:`~reliable_queue.errors.IsolatedChildError` when the call was stopped. A
    single-job handler's return value stays in the child.

    Args:
        child: the lane's child, ready (:meth:`ChildProcess.ready`).
        items: prepared jobs of one task; a batch task's items go in one call.
        deadline: monotonic seconds the call must end by (None: no limit).
        rng: jitter of the retry backoff.
        middleware: the worker's, outermost first.
    """
    definition = items[0].definition
    position = {id(item.ctx): n for n, item in enumerate(items)}
    report = IsolatedRun([])

    def send(pairs: list[tuple[Any, JobContext]]) -> list[BaseException | None]:
        report.ran.extend(position[id(ctx)] for _, ctx in pairs)
        result = child.call(definition.name, pairs, deadline)
        if isinstance(result, Finished):
            return result.errors
        report.stopped = result
        if isinstance(result, Killed):
            raise TimeLimitExceeded(
                f"the isolated run was killed at its time limit ({definition.name})"
            )
        raise result.error

    def single(payload: Any, ctx: JobContext) -> None:
        [error] = send([(payload, ctx)])
        if error is not None:
            raise error

    if definition.batch:
        report.outcomes = run_batch_call(send, items, rng, middleware)
    else:
        report.outcomes = [run_single_call(single, items[0], rng, middleware)]
    return report
