"""Bisection of a refused batch: the refused rows are found alone, the rest go out."""

from __future__ import annotations

import math
from collections.abc import Sequence

from workflows.errors import PublisherUnavailable
from workflows.isolation import ERROR_LIMIT, publish_isolated
from workflows.messages import StepMessage


class RefusingPublisher:
    """Refuses any batch holding one of ``bad`` keys; records what it accepted."""

    def __init__(self, bad: set[str], *, down_after: int | None = None) -> None:
        self.bad = bad
        self.down_after = down_after
        self.accepted: list[str] = []
        self.calls = 0

    def publish(self, messages: Sequence[StepMessage]) -> None:
        self.calls += 1
        if self.down_after is not None and self.calls > self.down_after:
            raise PublisherUnavailable("queue down")
        if any(m.idempotency_key in self.bad for m in messages):
            raise ValueError("WRONGTYPE Operation against a key holding the wrong kind of value")
        self.accepted.extend(m.idempotency_key for m in messages)


def items(n: int) -> list[tuple[int, StepMessage]]:
    return [(i, StepMessage("stock", "orders.stock", {"i": i}, f"{i}:stock")) for i in range(n)]


def test_one_poison_row_is_found_in_logarithmic_calls_and_the_rest_published():
    publisher = RefusingPublisher({"17:stock"})
    result = publish_isolated(publisher, items(64))
    assert list(result.refused) == [17]
    assert result.refused[17].startswith("ValueError: WRONGTYPE")
    assert sorted(result.published) == [i for i in range(64) if i != 17]
    assert sorted(publisher.accepted) == sorted(f"{i}:stock" for i in range(64) if i != 17)
    assert result.calls <= 2 * math.log2(64) + 1
    assert result.unavailable is None


def test_every_row_bad_costs_at_most_two_calls_per_row():
    bad = {f"{i}:stock" for i in range(10)}
    result = publish_isolated(RefusingPublisher(bad), items(10))
    assert sorted(result.refused) == list(range(10))
    assert result.published == []
    assert result.calls <= 2 * 10 - 1


def test_an_unreachable_queue_stops_the_work_and_blames_no_row():
    publisher = RefusingPublisher({"3:stock"}, down_after=1)
    result = publish_isolated(publisher, items(8))
    assert isinstance(result.unavailable, PublisherUnavailable)
    assert result.refused == {}
    assert result.published == []


class LongWindedPublisher:
    """Refuses everything with a multi-line, very long message."""

    def publish(self, messages: Sequence[StepMessage]) -> None:
        raise RuntimeError("line one\nline two " + "x" * 5000)


def test_refusal_text_is_one_bounded_line():
    result = publish_isolated(LongWindedPublisher(), items(1))
    assert "\n" not in result.refused[0]
    assert len(result.refused[0]) == ERROR_LIMIT
