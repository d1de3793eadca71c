"""The group commit of concurrent requests (``orders.app.group_commit``): callers that
wait while a batch is written go together in the next one, each gets its own outcome."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from orders.app.group_commit import GroupCommit


def test_a_lone_item_is_written_alone_and_gets_its_result() -> None:
    batches: list[list[int]] = []

    def write(items: list[int]) -> list[Any]:
        batches.append(items)
        return [n * 10 for n in items]

    assert GroupCommit(write).submit(4) == 40
    assert batches == [[4]]


def test_items_that_wait_during_a_write_go_together_in_the_next_ones_at_most_most() -> None:
    batches: list[list[int]] = []
    writing, release = threading.Event(), threading.Event()

    def write(items: list[int]) -> list[Any]:
        batches.append(items)
        if items == [0]:
            writing.set()
            release.wait(10)
        return [n * 10 for n in items]

    group = GroupCommit(write, most=3)
    results: dict[int, Any] = {}

    def submit(n: int) -> None:
        results[n] = group.submit(n)

    first = threading.Thread(target=submit, args=(0,))
    first.start()
    assert writing.wait(10)
    others = [threading.Thread(target=submit, args=(n,)) for n in range(1, 6)]
    for t in others:
        t.start()
    while len(group._waiting) < 5:  # every other caller queued behind the write
        threading.Event().wait(0.001)
    release.set()
    for t in [first, *others]:
        t.join(10)
    assert results == {n: n * 10 for n in range(6)}
    assert batches[0] == [0] and [len(b) for b in batches[1:]] == [3, 2]
    assert sorted(batches[1] + batches[2]) == [1, 2, 3, 4, 5]


def test_each_caller_gets_its_own_failure_and_the_others_their_results() -> None:
    group = GroupCommit(lambda items: [ValueError(n) if n % 2 else n for n in items])
    assert group.submit(2) == 2
    with pytest.raises(ValueError, match="3"):
        group.submit(3)


def test_a_write_that_raises_fails_its_whole_batch_and_the_next_one_still_runs() -> None:
    calls = [0]

    def write(items: list[int]) -> list[Any]:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("database away")
        return items

    group = GroupCommit(write)
    with pytest.raises(RuntimeError, match="database away"):
        group.submit(1)
    assert group.submit(2) == 2


def test_every_write_holds_the_turn() -> None:
    held: list[bool] = []
    turn = threading.Lock()

    def write(items: list[int]) -> list[Any]:
        held.append(turn.locked())
        return items

    group = GroupCommit(write, turn=turn)
    assert [group.submit(n) for n in range(3)] == [0, 1, 2]
    assert held == [True, True, True]
    with pytest.raises(ValueError):
        GroupCommit(write, most=0)


def test_a_coroutine_waits_for_its_item_on_the_event_loop_and_gets_its_result() -> None:
    threads: list[str] = []

    def write(items: list[int]) -> list[Any]:
        threads.append(threading.current_thread().name)
        return [n * 10 for n in items]

    group = GroupCommit(write)

    async def main() -> list[int]:
        return [await group.submit_async(4), await group.submit_async(5)]

    assert asyncio.run(main()) == [40, 50]
    # written on the group's writer thread (started again after it found nothing left)
    assert len(threads) == 2 and all(t.startswith("group-commit") for t in threads)


def test_coroutines_that_wait_during_a_write_go_together_in_the_next_ones_at_most_most() -> None:
    batches: list[list[int]] = []
    writing, release = threading.Event(), threading.Event()

    def write(items: list[int]) -> list[Any]:
        batches.append(items)
        if items == [0]:
            writing.set()
            release.wait(10)
        return [n * 10 for n in items]

    group = GroupCommit(write, most=3)

    async def main() -> list[int]:
        first = asyncio.ensure_future(group.submit_async(0))
        while not writing.is_set():
            await asyncio.sleep(0.001)
        others = [asyncio.ensure_future(group.submit_async(n)) for n in range(1, 6)]
        while len(group._waiting) < 5:  # every other caller queued behind the write
            await asyncio.sleep(0.001)
        release.set()
        return list(await asyncio.gather(first, *others))

    assert asyncio.run(main()) == [n * 10 for n in range(6)]
    assert batches == [[0], [1, 2, 3], [4, 5]]


def test_each_coroutine_gets_its_own_failure_and_a_failed_write_fails_only_its_batch() -> None:
    calls = [0]

    def write(items: list[int]) -> list[Any]:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("database away")
        return [ValueError(n) if n % 2 else n for n in items]

    group = GroupCommit(write)

    async def main() -> None:
        with pytest.raises(RuntimeError, match="database away"):
            await group.submit_async(1)
        assert await group.submit_async(2) == 2
        with pytest.raises(ValueError, match="3"):
            await group.submit_async(3)

    asyncio.run(main())


def test_a_cancelled_waiter_is_written_all_the_same_and_the_others_get_their_results() -> None:
    written: list[int] = []
    writing, release = threading.Event(), threading.Event()

    def write(items: list[int]) -> list[Any]:
        if items == [0]:
            writing.set()
            release.wait(10)
        written.extend(items)
        return items

    group = GroupCommit(write)

    async def main() -> int:
        first = asyncio.ensure_future(group.submit_async(0))
        while not writing.is_set():
            await asyncio.sleep(0.001)
        gone = asyncio.ensure_future(group.submit_async(1))
        kept = asyncio.ensure_future(group.submit_async(2))
        await asyncio.sleep(0.01)
        gone.cancel()  # the client went away: its placement still goes through
        release.set()
        await first
        return await kept

    assert asyncio.run(main()) == 2
    assert sorted(written) == [0, 1, 2]


def test_threads_and_coroutines_share_the_batches_and_each_gets_its_own_outcome() -> None:
    writing, release = threading.Event(), threading.Event()
    batches: list[list[str]] = []

    def write(items: list[str]) -> list[Any]:
        batches.append(items)
        if items == ["first"]:
            writing.set()
            release.wait(10)
        return [item.upper() for item in items]

    group = GroupCommit(write)
    results: dict[str, Any] = {}
    first = threading.Thread(target=lambda: results.update(first=group.submit("first")))
    first.start()
    assert writing.wait(10)
    thread = threading.Thread(target=lambda: results.update(thread=group.submit("thread")))
    thread.start()

    async def main() -> str:
        waiter = asyncio.ensure_future(group.submit_async("coroutine"))
        while len(group._waiting) < 2:
            await asyncio.sleep(0.001)
        release.set()
        return await waiter

    results["coroutine"] = asyncio.run(main())
    for t in (first, thread):
        t.join(10)
    assert results == {"first": "FIRST", "thread": "THREAD", "coroutine": "COROUTINE"}
    assert batches[0] == ["first"] and sorted(batches[1]) == ["coroutine", "thread"]
