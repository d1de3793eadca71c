"""The dead-letter queue: what lands there, and list / filter / show / redrive / purge."""

import time

import pytest
from queue_helpers import places

from reliable_queue import EnqueueRequest, QueueSettings, stats


def dead_letter(queue, task="t", reason="error", n=1, error="boom", traceback=""):
    ids = queue.enqueue_many([EnqueueRequest(task, {"i": i}) for i in range(n)])
    for job in queue.fetch(n).jobs:
        assert queue.dead(job.lease, reason, error=error, traceback=traceback)
        time.sleep(0.002)  # DLQ order is by time (ms); within one ms it is by id
    return ids


def test_dead_letter_keeps_payload_error_traceback_attempts_and_time(make_queue):
    queue = make_queue()
    before = time.time()
    (job_id,) = dead_letter(queue, task="stock.deduct", error="out of paper", traceback="tb...")

    letter = queue.dead_letters.show(job_id)

    assert letter.task == "stock.deduct" and letter.payload == {"i": 0}
    assert (letter.reason, letter.error, letter.traceback) == ("error", "out of paper", "tb...")
    assert letter.attempts == 1
    assert before - 1 < letter.dead_at < time.time() + 1
    assert queue.dead_letters.show("not-dead") is None


def test_traceback_is_bounded_by_settings(make_queue):
    queue = make_queue(settings=QueueSettings(traceback_max_chars=100))
    (job_id,) = dead_letter(queue, traceback="frame\n" * 1000)

    letter = queue.dead_letters.show(job_id)

    assert len(letter.traceback) <= 100 + len("...\n")


def test_unknown_reason_is_refused(make_queue):
    queue = make_queue()
    queue.enqueue("t", {})
    job = queue.fetch(1).jobs[0]

    with pytest.raises(ValueError):
        queue.dead(job.lease, "tired")


def test_list_filters_by_task_and_reason_oldest_first(make_queue):
    queue = make_queue()
    a = dead_letter(queue, task="a", reason="error", n=2)
    b = dead_letter(queue, task="b", reason="invalid_payload", n=1)
    c = dead_letter(queue, task="a", reason="unknown_task", n=1)

    assert [d.job_id for d in queue.dead_letters.list()] == a + b + c
    assert [d.job_id for d in queue.dead_letters.list(task="a")] == a + c
    assert [d.job_id for d in queue.dead_letters.list(reason="invalid_payload")] == b
    assert [d.job_id for d in queue.dead_letters.list(task="a", reason="error")] == a
    assert len(queue.dead_letters.list(limit=3)) == 3
    assert queue.dead_letters.size() == 4


def test_redrive_all_replays_with_a_fresh_attempt_count(make_queue):
    queue = make_queue()
    ids = dead_letter(queue, n=3)

    report = queue.dead_letters.redrive()

    assert sorted(report.redriven) == sorted(ids) and report.skipped == []
    assert queue.dead_letters.size() == 0
    jobs = queue.fetch(10).jobs
    assert sorted(j.job_id for j in jobs) == sorted(ids)
    assert {j.attempt for j in jobs} == {1}
    assert stats(queue).counters["redriven"] == 3


def test_redrive_by_task_by_reason_and_by_id(make_queue):
    queue = make_queue()
    a = dead_letter(queue, task="a", reason="error", n=2)
    b = dead_letter(queue, task="b", reason="retries_exhausted", n=2)
    c = dead_letter(queue, task="c", reason="error", n=2)

    assert sorted(queue.dead_letters.redrive(task="a").redriven) == sorted(a)
    assert sorted(queue.dead_letters.redrive(reason="retries_exhausted").redriven) == sorted(b)
    assert queue.dead_letters.redrive(ids=[c[1]]).redriven == [c[1]]

    assert [d.job_id for d in queue.dead_letters.list()] == [c[0]]
    assert stats(queue).ready == 5


def test_redrive_dry_run_changes_nothing(make_queue):
    queue = make_queue()
    ids = dead_letter(queue, n=3)

    report = queue.dead_letters.redrive(dry_run=True)

    assert report.dry_run and sorted(report.redriven) == sorted(ids)
    assert queue.dead_letters.size() == 3 and stats(queue).ready == 0


def test_redrive_rate_limit_spaces_out_batches_with_the_injected_sleep(make_queue):
    queue = make_queue()
    dead_letter(queue, n=10)
    sleeps: list[float] = []

    report = queue.dead_letters.redrive(rate=4.0, sleep=sleeps.append)

    assert len(report.redriven) == 10
    assert len(sleeps) == 2  # batches of 4, 4, 2: a pause after each but the last
    assert all(0.9 < s <= 1.0 for s in sleeps)  # 4 jobs at 4/s take a second each


def test_redrive_of_an_entry_whose_record_is_gone_reports_it_skipped(make_queue):
    queue = make_queue()
    gone, kept = dead_letter(queue, n=2)
    queue.client.hdel(queue.keys.key("jobs"), gone)  # the record was lost

    letter = queue.dead_letters.show(gone)
    report = queue.dead_letters.redrive()

    assert letter.record_missing and letter.task is None
    assert (report.redriven, report.skipped) == ([kept], [gone])
    assert queue.dead_letters.size() == 0
    assert queue.dead_letters.redrive(ids=["never-dead"]).skipped == ["never-dead"]


def test_purge_by_id_and_by_filter_deletes_for_good(make_queue):
    queue = make_queue()
    a = dead_letter(queue, task="a", n=2)
    b = dead_letter(queue, task="b", n=2)

    assert queue.dead_letters.purge(ids=[a[0]]) == 1
    assert queue.dead_letters.purge(task="b") == 2
    assert queue.dead_letters.purge(ids=["nope"]) == 0

    assert [d.job_id for d in queue.dead_letters.list()] == [a[1]]
    assert queue.client.hmget(queue.keys.key("jobs"), [a[0], *b]) == [None] * 3
    assert stats(queue).counters["purged"] == 3


def test_dlq_is_bounded_by_size_and_drops_are_counted(make_queue):
    queue = make_queue(settings=QueueSettings(dlq_max_size=3))
    ids = dead_letter(queue, n=5)

    assert [d.job_id for d in queue.dead_letters.list()] == ids[2:]  # oldest dropped
    assert queue.client.hmget(queue.keys.key("jobs"), ids[:2]) == [None, None]
    assert stats(queue).counters["dlq_dropped"] == 2


def test_dlq_is_bounded_by_age_and_drops_are_counted(make_queue):
    queue = make_queue(settings=QueueSettings(dlq_max_age_seconds=0.2))
    (old,) = dead_letter(queue)
    time.sleep(0.25)

    (new,) = dead_letter(queue)

    assert [d.job_id for d in queue.dead_letters.list()] == [new]
    assert places(queue, old) == []
    assert stats(queue).counters["dlq_dropped"] == 1
