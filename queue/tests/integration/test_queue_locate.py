"""locate / pending_job_for: where a job really is, by membership, not by record."""

import pytest

from reliable_queue import EnqueueRequest, QueueSettings
from reliable_queue.queue import LOCATE_BATCH


def test_locate_follows_a_job_through_every_structure(make_queue):
    queue = make_queue()
    (job_id,) = queue.enqueue_many([EnqueueRequest("t", {}, "k")])
    assert queue.locate(job_id) == "ready"

    job = queue.fetch(1).jobs[0]
    assert queue.locate(job_id) == "active"

    queue.nack(job.lease, delay=3600)
    assert queue.locate(job_id) == "delayed"


def test_locate_sees_dead_and_done(make_queue):
    queue = make_queue()
    dead_id, done_id = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(2)])
    first, second = queue.fetch(2).jobs
    assert first.job_id == dead_id
    queue.dead(first.lease, "error")
    queue.ack([second.lease])

    assert queue.locate(dead_id) == "dead"
    assert queue.locate(done_id) == "done"


def test_a_record_in_no_structure_is_nowhere_and_no_record_is_unknown(make_queue):
    queue = make_queue()
    (job_id,) = queue.enqueue_many([EnqueueRequest("t", {}, "k")])
    queue.client.delete(queue.keys.key("ready"))  # the record stays: an orphan

    assert queue.locate(job_id) == "nowhere"
    assert queue.locate("no-such-job") == "unknown"


@pytest.mark.parametrize("structure", ["ready", "delayed", "active", "dead"])
def test_pending_job_for_is_the_job_while_it_is_a_member(make_queue, structure):
    queue = make_queue()
    (job_id,) = queue.enqueue_many(
        [EnqueueRequest("t", {}, "k", delay=3600 if structure == "delayed" else 0)]
    )
    if structure in ("active", "dead"):
        job = queue.fetch(1).jobs[0]
        if structure == "dead":
            queue.dead(job.lease, "error")

    assert queue.locate(job_id) == structure
    assert queue.pending_job_for("k") == job_id


def test_pending_job_for_an_orphan_record_is_none(make_queue):
    """Regression: a record in no structure used to count as 'known to Redis'."""
    queue = make_queue()
    queue.enqueue_many([EnqueueRequest("t", {}, "k")])
    queue.client.delete(queue.keys.key("ready"))

    assert queue.pending_job_for("k") is None


def test_pending_job_for_a_finished_or_expired_key_is_none(make_queue):
    queue = make_queue(settings=QueueSettings(lease_seconds=2.0, job_retention_seconds=3600))
    queue.enqueue_many([EnqueueRequest("t", {}, "k")])
    queue.ack([queue.fetch(1).jobs[0].lease])

    assert queue.pending_job_for("k") is None
    assert queue.pending_job_for("never-used") is None


def test_locate_many_answers_every_id_in_order_across_script_calls(make_queue):
    """One round trip for any number of ids: more than LOCATE_BATCH spans several calls."""
    queue = make_queue()
    ids = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(LOCATE_BATCH + 30)])
    active, dead, done = queue.fetch(3).jobs
    queue.dead(dead.lease, "error")
    queue.ack([done.lease])
    (delayed,) = queue.enqueue_many([EnqueueRequest("t", {}, delay=3600)])
    queue.client.hdel(queue.keys.key("jobs"), ids[-1])  # still in ready, record gone
    asked = [delayed, active.job_id, "no-such-job", *ids[3:], dead.job_id, done.job_id, delayed]

    places = queue.locate_many(asked)

    assert places == [queue.locate(job_id) for job_id in asked]
    assert places[:3] == ["delayed", "active", "unknown"]
    assert places[3:-3] == ["ready"] * (LOCATE_BATCH + 27)
    assert places[-3:] == ["dead", "done", "delayed"]
    assert queue.locate_many([]) == []


def test_pending_jobs_for_checks_many_keys_in_two_round_trips(make_queue):
    queue = make_queue()
    _finished, orphan, waiting = queue.enqueue_many(
        [EnqueueRequest("t", {"i": i}, f"k{i}") for i in range(3)]
    )
    queue.ack([queue.fetch(1).jobs[0].lease])  # the oldest: ``_finished``
    queue.client.lrem(queue.keys.key("ready"), 0, orphan)  # a record in no structure
    calls = []
    real = queue.client.pipeline

    def counting_pipeline(*args, **kwargs):
        calls.append("pipeline")
        return real(*args, **kwargs)

    queue.client.pipeline = counting_pipeline
    try:
        jobs = queue.pending_jobs_for(["k0", "k1", "k2", "never-used"])
    finally:
        del queue.client.pipeline

    assert jobs == [None, None, waiting, None]
    assert calls == ["pipeline"]  # the GETs; one ``locate`` call for the jobs found
