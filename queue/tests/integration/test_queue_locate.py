"""locate / pending_job_for: where a job really is, by membership, not by record."""

import pytest

from reliable_queue import EnqueueRequest, QueueSettings


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
