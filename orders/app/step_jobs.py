"""The queue job of each step of an order, as ``orders status ID`` and the order page show it.

A step row records the job id of the worker that ran it; a step not run yet is
found through its idempotency key in Redis. That key is untrusted data: one
holding a value of the wrong type (a foreign writer, a manual edit) gives that
step a note instead of a job id, and the other steps are still answered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from orders.domain.queries import StepView
from reliable_queue import Queue
from reliable_queue.inspection import idempotency_jobs
from workflows.models import idempotency_key


@dataclass(frozen=True)
class StepJobs:
    """Step -> its job id (None: none known), and step -> a note on what could not be read.

    Attributes:
        ids: every step given, its job id or None.
        problems: the steps whose Redis keys could not be read, with one line each.
    """

    ids: dict[str, str | None] = field(default_factory=dict)
    problems: dict[str, str] = field(default_factory=dict)


def step_jobs(
    queues: Mapping[str, Queue], workflow_id: int | None, steps: Iterable[StepView]
) -> StepJobs:
    """The job id of each step: recorded by the worker that ran it, else the unfinished
    job its idempotency key maps to in Redis (one round trip per queue and two reads).

    Args:
        queues: step queue name -> its queue.
        workflow_id: the order's workflow (None: no workflow, only recorded ids).
        steps: the order's steps.

    Returns:
        A :class:`StepJobs`.

    Raises:
        QueueConnectionError: Redis unreachable.
    """
    out = StepJobs()
    asked: dict[str, list[str]] = {}
    for s in steps:
        out.ids[s.step] = s.job_id
        if s.job_id is None and workflow_id is not None and s.step in queues:
            asked.setdefault(s.step, []).append(idempotency_key(workflow_id, s.step))
    for step, keys in asked.items():
        (found,) = idempotency_jobs(queues[step], keys)
        out.ids[step] = found.pending
        if found.problem:
            out.problems[step] = found.problem
    return out
