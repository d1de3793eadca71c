"""The audit finds orphans, doubles and members without a record; repair puts orphans back."""

import json

from queue_helpers import places, running_worker, wait_until

from reliable_queue import EnqueueRequest, QueueSettings, TaskRegistry, audit, explain, stats


def test_a_healthy_queue_audits_clean_and_the_gauges_say_so(make_queue):
    queue = make_queue()
    queue.enqueue_many([EnqueueRequest("t", {"i": i}, delay=3600 * (i % 2)) for i in range(30)])
    queue.ack([j.lease for j in queue.fetch(5).jobs])
    queue.fetch(3)

    report = audit(queue, step=4)

    assert report.clean and report.complete and report.steps > 6
    assert stats(queue).audit == {"orphans": 0, "doubles": 0, "no_record": 0}


def test_an_orphan_is_found_and_repair_puts_it_back_without_counting_an_attempt(make_queue):
    queue = make_queue()
    (job_id, other) = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(2)])
    job = queue.fetch(1).jobs[0]
    queue.nack(job.lease, error="boom")  # attempt 1 counted, back on ready
    queue.client.lrem(queue.keys.key("ready"), 0, job_id)  # lost: record in no structure

    found = audit(queue)
    assert (found.orphans, found.repaired, found.examples["orphans"]) == (1, 0, [job_id])
    assert queue.locate(job_id) == "nowhere"
    assert stats(queue).orphans == 1

    repaired = audit(queue, repair=True)

    assert repaired.repaired == 1
    assert places(queue, job_id) == ["ready"] and places(queue, other) == ["ready"]
    info = explain(queue, job_id)
    assert info.attempts == 1  # the repair itself is not an attempt
    assert info.last_failure["reason"] == "orphan_repaired"
    assert json.loads(info.last_failure["previous"])["error"] == "boom"
    assert stats(queue).counters["orphans_repaired"] == 1
    assert stats(queue).orphans == 0
    assert audit(queue).clean


def test_doubles_and_members_without_a_record_are_reported(make_queue):
    queue = make_queue()
    (job_id,) = queue.enqueue_many([EnqueueRequest("t", {})])
    queue.client.zadd(queue.keys.key("done"), {job_id: 1})  # ready and done at once
    queue.client.zadd(queue.keys.key("delayed"), {"ghost": 1})  # no record

    report = audit(queue, step=1)

    assert report.doubles == 1 and report.examples["doubles"] == [job_id]
    assert report.no_record == 1 and report.examples["no_record"] == ["ghost"]
    assert report.orphans == 0
    assert stats(queue).audit == {"orphans": 0, "doubles": 1, "no_record": 1}


def test_max_steps_bounds_the_walk_and_an_incomplete_audit_is_not_recorded(make_queue):
    queue = make_queue()
    queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(50)])

    report = audit(queue, step=5, max_steps=3)

    assert not report.complete and report.steps == 3
    assert stats(queue).audit == {}


def test_jobs_moving_under_a_running_worker_are_never_called_orphans(redis_client, key_prefix):
    from reliable_queue import Queue

    registry = TaskRegistry()
    registry.task("t")(lambda p, c: None)
    settings = QueueSettings(lease_seconds=30, max_block_seconds=0.2)
    queue = Queue(redis_client, "busy", prefix=key_prefix, settings=settings)
    total = 3000
    with running_worker(
        redis_client, ["busy"], registry, prefix=key_prefix, settings=settings, batch_size=20
    ):
        queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(total)])
        reports = []
        while stats(queue).counters["succeeded"] < total:
            reports.append(audit(queue, step=50, repair=True))
        wait_until(lambda: stats(queue).counters["succeeded"] == total)
    assert reports and all(r.orphans == 0 and r.doubles == 0 for r in reports)
    assert stats(queue).counters["succeeded"] == total  # nothing ran twice by a repair
