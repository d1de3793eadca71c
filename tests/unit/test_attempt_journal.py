"""The attempt journal: what workers write, and the two invariants judged from it.

The checks must be able to fail: each is shown a journal that breaks it.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
from pathlib import Path

from orders.chaos.journal import (
    FENCING_REISSUED,
    LAPSED_COMMIT,
    DoneStep,
    Journal,
    lapsed_commits,
    parse_lines,
    read_journal,
    reissued_numbers,
)
from orders.worker.journal import AttemptJournal, lost_reason
from reliable_queue import Lease, RawJob
from reliable_queue.execution import Dead, Retry, Succeeded


def job(n: int, queue: str = "stock", job_id: str = "j1") -> RawJob:
    return RawJob(queue, job_id, f"{n}:host:1:ab", 1, b"")


def lease(n: int, job_id: str = "j1") -> Lease:
    return Lease(job_id, f"{n}:host:1:ab")


def test_only_outcomes_that_give_the_attempt_up_are_lost() -> None:
    # a time-out may come while the commit block runs, which it does not stop: the
    # guard tells the journal about one before the block (AttemptJournal.attempt_lost)
    timed_out = f"TimeLimitExceeded: the run took longer than its limit of {3.0} s"
    assert lost_reason(Retry(lease(1), 0.2, timed_out, "")) is None
    assert lost_reason(Dead(lease(1), "timed_out", timed_out, "")) is None
    assert lost_reason(Retry(lease(1), 0.2, "AttemptLost: lease_expired", "")) == "attempt_lost"
    assert lost_reason(Retry(lease(1), 0.2, "FencedOut: step 3 saw 9", "")) == "fenced_out"
    # a handler error may come after a commit: it says nothing about the commit
    assert lost_reason(Retry(lease(1), 0.2, "RedisError: down", "")) is None
    assert lost_reason(Dead(lease(1), "retries_exhausted", "ValueError: x", "")) is None
    assert lost_reason(Succeeded(lease(1))) is None


def test_the_writer_journals_leases_and_given_up_attempts(tmp_path: Path) -> None:
    journal = AttemptJournal(tmp_path / "j")
    journal.leased([job(10), job(11, job_id="j2"), job(12, job_id="j3")])
    journal.attempt_lost("stock", lease(10), "timed_out")
    journal.settled(job(12, job_id="j3"), Retry(lease(12, "j3"), 0.2, "FencedOut: saw 13", ""))
    journal.settled(job(11, job_id="j2"), Succeeded(lease(11, "j2")))
    journal.close()

    read = read_journal(tmp_path / "j")

    assert read.leases == {("stock", 10): ["j1"], ("stock", 11): ["j2"], ("stock", 12): ["j3"]}
    assert read.lost == {("stock", 10): "timed_out", ("stock", 12): "fenced_out"}
    assert read.unreadable == 0


def _journal_then_die(directory: str) -> None:
    journal = AttemptJournal(Path(directory))
    journal.leased([job(5)])
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_line_survives_the_sigkill_of_its_process(tmp_path: Path) -> None:
    child = multiprocessing.get_context("spawn").Process(
        target=_journal_then_die, args=(str(tmp_path),)
    )
    child.start()
    child.join(30)

    assert child.exitcode == -signal.SIGKILL
    assert read_journal(tmp_path).leases == {("stock", 5): ["j1"]}


def test_a_torn_or_foreign_line_is_counted_not_fatal() -> None:
    journal = parse_lines(['{"e":"lease","q":"stock","job":"a","n":1}', '{"e":"lea', "x", "{}"])

    assert journal.leases == {("stock", 1): ["a"]}
    assert journal.unreadable == 3


def test_a_fencing_number_handed_out_twice_is_a_violation() -> None:
    journal = parse_lines(
        [
            '{"e":"lease","q":"stock","job":"a","n":7}',
            '{"e":"lease","q":"stock","job":"b","n":7}',  # the counter went back
            '{"e":"lease","q":"points","job":"c","n":7}',  # another queue: its own numbers
            '{"e":"lease","q":"stock","job":"a","n":8}',
        ]
    )

    found = reissued_numbers(journal)

    assert [(v.invariant, v.queue) for v in found] == [(FENCING_REISSUED, "stock")]
    assert "fencing number 7 handed out 2 times" in found[0].detail
    assert reissued_numbers(parse_lines(['{"e":"lease","q":"stock","job":"a","n":7}'])) == []


def test_a_step_done_by_an_attempt_its_worker_gave_up_is_a_violation() -> None:
    journal = Journal(lost={("stock", 7): "timed_out", ("points", 9): "fenced_out"})
    done = [
        DoneStep(1, "stock", "stock", 7),  # committed by the timed-out attempt
        DoneStep(2, "stock", "stock", 8),  # by the retry: fine
        DoneStep(3, "points", "points", 7),  # number 7 of another queue: fine
    ]

    found = lapsed_commits(journal, done)

    assert [(v.invariant, v.order_id) for v in found] == [(LAPSED_COMMIT, 1)]
    assert "attempt 7" in found[0].detail and "timed_out" in found[0].detail
    assert lapsed_commits(Journal(), done) == []


def test_the_number_of_violations_named_is_bounded() -> None:
    journal = Journal(lost={("stock", n): "timed_out" for n in range(100)})
    done = [DoneStep(n, "stock", "stock", n) for n in range(100)]

    assert len(lapsed_commits(journal, done, limit=10)) == 10
