"""Group commit: the requests that wait while one transaction is written go together
in the next one.

A caller adds its item to the waiting list. A thread caller then waits for the write
lock; the thread that gets it writes every item waiting then (at most ``most`` a call,
oldest first) and hands each its outcome; a thread whose item was written by another
returns at once. A coroutine caller (:meth:`GroupCommit.submit_async`) holds no thread
while it waits: the first to find no writer running starts one on the group's own
thread, which writes batches until the list is empty and hands each coroutine its
outcome on its event loop. Nothing waits for a batch to fill: a lone request is
written alone, at once, and under load the batch is whatever queued behind the
previous write. The write function decides what an item's failure does to the others
(``orders.app.api_orders.commit_placements``: nothing).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Generic, TypeVar

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger("orders.group_commit")


class _Entry(Generic[T, R]):
    __slots__ = ("item", "done", "result", "error", "future")

    def __init__(self, item: T, future: asyncio.Future[R] | None = None) -> None:
        self.item = item
        self.done = False
        self.result: R | None = None
        self.error: BaseException | None = None
        self.future = future


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

    Raises:
        ValueError: ``most`` is below 1.
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
        self._draining = False
        self._writer: ThreadPoolExecutor | None = None

    def submit(self, item: T) -> R:
        """Write ``item`` (alone or with others waiting now) and return its result;
        blocks the calling thread until it is written.

        Raises:
            BaseException: the item's failure as ``write`` reported it, or whatever
                ``write`` raised for the whole batch.
        """
        entry: _Entry[T, R] = _Entry(item)
        with self._mutex:
            self._waiting.append(entry)
        with self._writing:
            while not entry.done:  # bounded: the waiting list only holds callers that wait
                self._write(self._take())
        if entry.error is not None:
            raise entry.error
        return entry.result  # type: ignore[return-value]

    async def submit_async(self, item: T) -> R:
        """:meth:`submit` for a coroutine: waits on its event loop, not in a thread.

        The item is written on the group's writer thread (started here when none runs).
        Once submitted it is written whatever happens to the awaiting coroutine: a
        cancelled caller only stops waiting for the outcome.

        Raises:
            BaseException: as :meth:`submit`.
        """
        loop = asyncio.get_running_loop()
        entry: _Entry[T, R] = _Entry(item, loop.create_future())
        with self._mutex:
            self._waiting.append(entry)
            start = not self._draining
            self._draining = True
            if start and self._writer is None:
                self._writer = ThreadPoolExecutor(1, thread_name_prefix="group-commit")
        if start:
            assert self._writer is not None
            self._writer.submit(self._drain)
        assert entry.future is not None
        return await entry.future

    def _take(self) -> list[_Entry[T, R]]:
        with self._mutex:
            batch = self._waiting[: self.most]
            del self._waiting[: self.most]
        return batch

    def _drain(self) -> None:
        """The writer thread: write batches until nothing waits."""
        try:
            while True:
                with self._mutex:
                    if not self._waiting:
                        self._draining = False
                        return
                with self._writing:
                    self._write(self._take())
        except BaseException:  # a bug here must not leave every later caller waiting
            with self._mutex:
                self._draining = False
            log.exception("group commit writer stopped")
            raise

    def _write(self, batch: list[_Entry[T, R]]) -> None:
        if not batch:
            return
        try:
            with self.turn:
                outcomes = self.write([e.item for e in batch])
            if len(outcomes) != len(batch):
                raise RuntimeError(f"write returned {len(outcomes)} outcomes for {len(batch)}")
        except BaseException as exc:
            outcomes = [exc] * len(batch)
        waiting: dict[asyncio.AbstractEventLoop, list[_Entry[T, R]]] = {}
        for e, outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                e.error = outcome
            else:
                e.result = outcome
            e.done = True
            if e.future is not None:
                waiting.setdefault(e.future.get_loop(), []).append(e)
        for loop, entries in waiting.items():  # one wake-up per loop and batch
            try:
                loop.call_soon_threadsafe(_settle, entries)
            except RuntimeError:  # the loop closed: nobody waits for these any more
                pass


def _settle(entries: list[_Entry[Any, Any]]) -> None:
    """On the waiters' event loop: hand each its outcome."""
    for e in entries:
        future = e.future
        if future is None or future.done():
            continue
        if e.error is not None:
            future.set_exception(e.error)
        else:
            future.set_result(e.result)
