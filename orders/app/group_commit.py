"""Group commit: the requests that wait while one transaction is written go together
in the next one.

Each caller's thread adds its item and waits for the write lock. The thread that
gets it writes every item waiting then (at most ``most`` a call, oldest first) and
hands each its outcome; a thread whose item was written by another returns at once.
Nothing waits for a batch to fill: a lone request is written alone, at once, and
under load the batch is whatever queued behind the previous write (at most the
server's threads). The write function decides what an item's failure does to the
others (``orders.app.api_orders.commit_placements``: nothing).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class _Entry(Generic[T, R]):
    __slots__ = ("item", "done", "result", "error")

    def __init__(self, item: T) -> None:
        self.item = item
        self.done = False
        self.result: R | None = None
        self.error: BaseException | None = None


class GroupCommit(Generic[T, R]):
    """Writes the items of concurrent callers in shared calls of ``write``.

    Args:
        write: writes a batch (1 to ``most`` items, in arrival order) and returns one
            outcome per item, in the same order: a result, or the exception that item's
            caller raises. An exception ``write`` raises itself goes to every caller
            of that batch.
        most: items per call of ``write`` (>= 1).
        turn: held around each call of ``write`` (e.g. the database's one write turn
            on SQLite); None: nothing.
    """

    def __init__(
        self,
        write: Callable[[list[T]], Sequence[R | BaseException]],
        *,
        most: int = 100,
        turn: AbstractContextManager[Any] | None = None,
    ) -> None:
        if most < 1:
            raise ValueError("GroupCommit needs most >= 1")
        self.write = write
        self.most = most
        self.turn = turn or nullcontext()
        self._mutex = threading.Lock()
        self._writing = threading.Lock()
        self._waiting: list[_Entry[T, R]] = []

    def submit(self, item: T) -> R:
        """Write ``item`` (alone or with others waiting now) and return its result.

        Raises:
            BaseException: the item's failure as ``write`` reported it, or whatever
                ``write`` raised for the whole batch.
        """
        entry: _Entry[T, R] = _Entry(item)
        with self._mutex:
            self._waiting.append(entry)
        with self._writing:
            while not entry.done:  # bounded: the waiting list only holds threads that wait
                with self._mutex:
                    batch = self._waiting[: self.most]
                    del self._waiting[: self.most]
                self._write(batch)
        if entry.error is not None:
            raise entry.error
        return entry.result  # type: ignore[return-value]

    def _write(self, batch: list[_Entry[T, R]]) -> None:
        try:
            with self.turn:
                outcomes = self.write([e.item for e in batch])
            if len(outcomes) != len(batch):
                raise RuntimeError(f"write returned {len(outcomes)} outcomes for {len(batch)}")
        except BaseException as exc:
            outcomes = [exc] * len(batch)
        for e, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                e.error = outcome
            else:
                e.result = outcome
            e.done = True
