"""Publish a batch of outbox rows so that one bad row cannot hold back the rest.

The batch goes out in one call; when the queue refuses it, it is split in
halves and each half is tried again, down to single rows. ``k`` bad rows in a
batch of ``n`` cost at most ``2 * k * log2(n) + 1`` calls (and never more than
``2 * n - 1``), so a poison row is found without retrying the whole batch row
by row, and without any loop that is not bounded by the batch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from workflows.errors import PublisherUnavailable
from workflows.messages import Publisher, StepMessage

#: longest refusal text kept per row, characters
ERROR_LIMIT = 500


@dataclass
class IsolatedPublish:
    """What :func:`publish_isolated` did.

    Attributes:
        published: row ids whose messages the queue accepted.
        refused: row id -> refusal text (``"<ExceptionType>: <message>"``, at most
            :data:`ERROR_LIMIT` characters) for each row the queue refused alone.
        unavailable: set when the queue could not be reached; the rows neither
            published nor refused were not tried (or not to the end) and stay pending.
        calls: publish calls made.
    """

    published: list[int] = field(default_factory=list)
    refused: dict[int, str] = field(default_factory=dict)
    unavailable: PublisherUnavailable | None = None
    calls: int = 0


def describe(exc: BaseException) -> str:
    """One line naming an exception and its message, cut to :data:`ERROR_LIMIT`."""
    text = " ".join(f"{type(exc).__name__}: {exc}".split())
    return text[:ERROR_LIMIT]


def publish_isolated(
    publisher: Publisher, items: Sequence[tuple[int, StepMessage]]
) -> IsolatedPublish:
    """Publish ``(row id, message)`` pairs, isolating refusals to the smallest group.

    Args:
        publisher: the queue adapter.
        items: the rows to publish, in order.

    Returns:
        An :class:`IsolatedPublish`. Never raises for a refused row; a queue that
        cannot be reached ends the work early with ``unavailable`` set.
    """
    result = IsolatedPublish()
    stack: list[Sequence[tuple[int, StepMessage]]] = [items] if items else []
    while stack:
        chunk = stack.pop()
        result.calls += 1
        try:
            publisher.publish([message for _, message in chunk])
        except PublisherUnavailable as exc:
            result.unavailable = exc
            break
        except Exception as exc:  # a refusal: find the rows to blame
            if len(chunk) == 1:
                result.refused[chunk[0][0]] = describe(exc)
            else:
                middle = len(chunk) // 2
                stack.append(chunk[middle:])
                stack.append(chunk[:middle])
            continue
        result.published.extend(row_id for row_id, _ in chunk)
    return result
