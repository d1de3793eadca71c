"""A job id typed or pasted into the dashboard: the exact id, or a unique prefix.

The CLI's rule (:func:`reliable_queue.find_job`): an exact id of any length,
else a prefix of at least ``MIN_PREFIX`` characters that names one job. Pages
that find a job by a prefix redirect to its full id, so the address names it.
"""

from __future__ import annotations

from collections.abc import Callable

from orders.web.params import BadParam
from reliable_queue import (
    AmbiguousJobIdError,
    JobIdNotFoundError,
    JobIdTooShortError,
    Queue,
    find_job,
)


def full_job_id(
    queue: Queue, given: str, *, dead_only: bool, missing: str, link: Callable[[str], str]
) -> str | None:
    """The full id of the one job in ``queue`` whose id is ``given`` or starts with it.

    Args:
        queue: where to look (only this queue).
        given: an id as stored, or a prefix of one.
        dead_only: look only in the queue's DLQ.
        missing: the message when nothing matches (a hint on the prefix rule is added).
        link: full job id -> its page, for the candidates of an ambiguous prefix.

    Returns:
        The full id, or None when ``given`` is itself an exact id (no redirect needed).

    Raises:
        BadParam: 404 when no job matches (or the prefix is too short), 400 when
            several do (the candidates listed, each with its link).
        QueueConnectionError: Redis unreachable.
    """
    try:
        match = find_job([queue], given, dead_only=dead_only)
    except JobIdTooShortError as exc:
        raise BadParam(f"{missing} ({exc})", 404) from None
    except AmbiguousJobIdError as exc:
        links = [(link(job), job) for _, job in exc.candidates]
        raise BadParam(str(exc), 400, links=links) from None
    except JobIdNotFoundError as exc:
        raise BadParam(f"{missing} ({exc})", 404) from None
    return None if match.job_id == given else match.job_id
