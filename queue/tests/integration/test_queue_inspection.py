"""Explain, stats and retention: what an operator can see, and what expires."""

import time

from queue_helpers import redis_now

from reliable_queue import EnqueueRequest, QueueSettings, explain, stats


def test_explain_a_ready_job(make_queue):
    queue = make_queue()
    job_id = queue.enqueue("t", {"a": 1}, idempotency_key="k-1", max_attempts=4)

    info = explain(queue, job_id)

    assert (info.state, info.queue, info.task, info.payload) == ("ready", "jobs", "t", {"a": 1})
    assert (info.idempotency_key, info.max_attempts, info.attempts) == ("k-1", 4, 0)
    assert abs(info.enqueued_at - time.time()) < 5
    assert info.lease_owner is info.next_run_at is info.dead_reason is None


def test_explain_a_scheduled_job(make_queue, redis_client):
    queue = make_queue()
    job_id = queue.enqueue("t", {}, delay=30)

    info = explain(queue, job_id)

    assert info.state == "delayed"
    assert abs(info.next_run_at - (redis_now(redis_client) + 30)) < 1


def test_explain_an_active_job_shows_its_lease(make_queue, redis_client):
    queue = make_queue()
    job_id = queue.enqueue("t", {})
    job = queue.fetch(1, lease_seconds=10, worker_id="host:42:ab").jobs[0]

    info = explain(queue, job_id)

    assert (info.state, info.attempts, info.lease_owner) == ("active", 1, "host:42:ab")
    assert info.lease_token == job.token
    assert abs(info.lease_deadline - (redis_now(redis_client) + 10)) < 1


def test_explain_a_job_waiting_for_its_retry(make_queue, redis_client):
    queue = make_queue()
    job_id = queue.enqueue("t", {})
    queue.nack(queue.fetch(1).jobs[0].lease, delay=20, error="ValueError: flaky")

    info = explain(queue, job_id)

    assert (info.state, info.attempts) == ("delayed", 1)
    assert abs(info.next_run_at - (redis_now(redis_client) + 20)) < 1
    assert info.last_failure["reason"] == "retry"
    assert info.last_failure["error"] == "ValueError: flaky"


def test_explain_a_dead_job_shows_its_reason(make_queue):
    queue = make_queue()
    job_id = queue.enqueue("t", {})
    queue.dead(queue.fetch(1).jobs[0].lease, "unknown_task", error="unknown task 't'")

    info = explain(queue, job_id)

    assert (info.state, info.dead_reason, info.attempts) == ("dead", "unknown_task", 1)
    assert info.dead_at is not None and info.last_failure["error"] == "unknown task 't'"


def test_explain_a_done_job_inside_the_retention_window(make_queue):
    queue = make_queue()
    job_id = queue.enqueue("t", {})
    queue.ack([queue.fetch(1).jobs[0].lease])

    info = explain(queue, job_id)

    assert info.state == "done" and info.finished_at is not None and info.lease_token is None


def test_explain_an_unreadable_record_and_an_unknown_id(make_queue):
    queue = make_queue()
    queue.client.hset(queue.keys.key("jobs"), "foreign", b"\xff\xfe")
    queue.client.lpush(queue.keys.key("ready"), "foreign")
    queue.client.hset(queue.keys.key("jobs"), "stray", b'{"t":"x"}')  # record without a place

    foreign = explain(queue, "foreign")

    assert foreign.state == "ready" and foreign.task is None and foreign.record_error
    assert explain(queue, "stray").state == "unknown"
    assert explain(queue, "never-existed") is None


def test_finished_records_expire_after_retention_but_counters_stay(make_queue):
    # fault 10: completed ids and job records grew forever
    queue = make_queue(settings=QueueSettings(job_retention_seconds=0.3))
    ids = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(50)])
    queue.ack([j.lease for j in queue.fetch(50).jobs])
    assert explain(queue, ids[0]).state == "done"
    time.sleep(0.35)

    last = queue.enqueue("t", {})
    queue.ack([queue.fetch(1).jobs[0].lease])  # settling trims what is past the window

    assert [explain(queue, i) for i in ids] == [None] * 50
    for kind in ("jobs", "attempts", "info"):
        assert queue.client.hkeys(queue.keys.key(kind)) in ([last.encode()], [])
    s = stats(queue)
    assert (s.done, s.counters["succeeded"], s.counters["enqueued"]) == (1, 51, 51)


def test_zero_retention_deletes_the_record_at_ack(make_queue):
    queue = make_queue(settings=QueueSettings(job_retention_seconds=0))
    job_id = queue.enqueue("t", {})
    queue.ack([queue.fetch(1).jobs[0].lease])

    assert explain(queue, job_id) is None
    assert queue.client.hlen(queue.keys.key("jobs")) == 0
    assert stats(queue).counters["succeeded"] == 1


def test_stats_report_counters_and_depths_in_one_call(make_queue):
    queue = make_queue()
    ids = queue.enqueue_many([EnqueueRequest("t", {"i": i}) for i in range(6)])
    queue.enqueue("t", {}, delay=60)
    queue.enqueue("t", {}, idempotency_key="k")
    queue.enqueue("t", {}, idempotency_key="k")
    a, b, c, d = queue.fetch(4, lease_seconds=30).jobs
    queue.ack([a.lease])
    queue.nack(b.lease, delay=0)
    queue.dead(c.lease, "error")
    queue.ack([a.lease])  # stale

    s = stats(queue)

    assert (s.queue, s.ready, s.delayed, s.active, s.dead, s.done) == ("jobs", 4, 1, 1, 1, 1)
    expected = {"enqueued": 8, "duplicates": 1, "succeeded": 1, "retried": 1, "dead": 1}
    assert {k: s.counters[k] for k in expected} == expected
    assert s.counters["dead:error"] == 1 and s.counters["stale_refused"] == 1
    assert s.counters["reaped"] == 0  # every counter is present even when never bumped
    assert s.as_dict()["counters"] == s.counters
    assert len(ids) == 6 and d.job_id in ids
