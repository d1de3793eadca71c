"""Replay: a finished job runs again, as after an AOF replay (fault injection for chaos runs)."""

from queue_helpers import places

from reliable_queue import EnqueueRequest, QueueSettings, explain, stats


def finish_one(queue, payload=None):
    (job_id,) = queue.enqueue_many([EnqueueRequest("t", payload or {"n": 1}, "key-1")])
    job = queue.fetch(1).jobs[0]
    assert queue.ack([job.lease]).acked == [job_id]
    return job_id


def test_a_replayed_finished_job_is_delivered_again_from_attempt_one(make_queue):
    queue = make_queue()
    job_id = finish_one(queue, {"n": 7})

    replayed, skipped = queue.replay([job_id])

    assert (replayed, skipped) == ([job_id], [])
    assert places(queue, job_id) == ["ready"]
    again = queue.fetch(1).jobs[0]
    assert again.job_id == job_id and again.attempt == 1
    assert explain(queue, job_id).payload == {"n": 7}
    assert queue.ack([again.lease]).acked == [job_id]
    assert stats(queue).counters["replayed"] == 1
    assert stats(queue).counters["succeeded"] == 2


def test_replay_wakes_an_idle_worker(make_queue):
    queue = make_queue()
    job_id = finish_one(queue)
    queue.client.delete(queue.keys.key("wake"))

    queue.replay([job_id])

    assert queue.wait_for_work(0.05) is True


def test_jobs_that_are_not_finished_are_skipped_and_left_alone(make_queue):
    queue = make_queue()
    leased, waiting = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(2)])
    assert queue.fetch(1).jobs[0].job_id == leased  # FIFO: the first enqueued goes first

    replayed, skipped = queue.replay([leased, waiting, "no-such-job"])

    assert replayed == []
    assert skipped == [leased, waiting, "no-such-job"]
    assert places(queue, leased) == ["active"]
    assert places(queue, waiting) == ["ready"]
    assert stats(queue).counters["replayed"] == 0


def test_a_finished_job_whose_record_expired_cannot_be_replayed(make_queue):
    queue = make_queue(settings=QueueSettings(lease_seconds=2.0, job_retention_seconds=0))
    job_id = finish_one(queue)

    assert queue.replay([job_id]) == ([], [job_id])
    assert places(queue, job_id) == []


def test_a_replayed_job_keeps_its_idempotency_key(make_queue):
    queue = make_queue()
    job_id = finish_one(queue)
    queue.replay([job_id])

    assert queue.pending_job_for("key-1") == job_id
    assert queue.enqueue("t", {"n": 2}, idempotency_key="key-1") == job_id
