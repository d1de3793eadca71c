"""Leases and fencing: fetch, ack, nack, extend, release and reap against real Redis."""

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
from queue_helpers import places, redis_now

from reliable_queue import EnqueueRequest, Lease, QueueSettings, explain, stats
from reliable_queue.limits import SCRIPT_BATCH

TINY = 0.05  # seconds: a lease that expires during a short sleep


def enqueue(queue, n, **kw):
    return queue.enqueue_many([EnqueueRequest("t", {"i": i}, **kw) for i in range(n)])


def test_fetch_leases_jobs_with_a_deadline_on_the_redis_clock(make_queue, redis_client):
    queue = make_queue()
    (job_id,) = enqueue(queue, 1)
    before = redis_now(redis_client)

    (job,) = queue.fetch(3, lease_seconds=2.0, worker_id="w-1").jobs

    info = explain(queue, job_id)
    assert info.state == "active" and info.lease_owner == "w-1"
    assert info.lease_token == job.token
    assert before + 2.0 - 0.001 <= info.lease_deadline <= redis_now(redis_client) + 2.0


def test_each_delivery_gets_a_fresh_token_with_a_larger_fencing_number(make_queue):
    queue = make_queue()
    (job_id,) = enqueue(queue, 1)
    first = queue.fetch(1, lease_seconds=TINY).jobs[0]
    time.sleep(TINY + 0.02)

    second = queue.fetch(1).jobs[0]

    assert second.job_id == job_id and second.attempt == 1  # a first loss is not charged
    assert second.token != first.token
    assert int(second.token.split(":")[0]) > int(first.token.split(":")[0])


def test_ack_with_the_current_token_finishes_the_job(make_queue):
    queue = make_queue()
    (job_id,) = enqueue(queue, 1)
    job = queue.fetch(1).jobs[0]

    result = queue.ack([job.lease])

    assert (result.acked, result.refused) == ([job_id], [])
    assert places(queue, job_id) == ["done"]
    assert stats(queue).counters["succeeded"] == 1


def test_stale_lease_token_cannot_ack(make_queue):
    # fault 6: a worker whose lease expired could ack, removing the job another worker held
    queue = make_queue()
    (job_id,) = enqueue(queue, 1)
    old = queue.fetch(1, lease_seconds=TINY, worker_id="slow").jobs[0]
    time.sleep(TINY + 0.02)
    new = queue.fetch(1, worker_id="fast").jobs[0]

    stale = queue.ack([old.lease])

    assert (stale.acked, stale.refused) == ([], [job_id])
    assert places(queue, job_id) == ["active"]
    assert explain(queue, job_id).lease_token == new.token
    assert queue.ack([new.lease]).acked == [job_id]
    assert stats(queue).counters["stale_refused"] == 1


def test_stale_lease_token_cannot_nack_or_dead_letter(make_queue):
    queue = make_queue()
    (job_id,) = enqueue(queue, 1)
    old = queue.fetch(1, lease_seconds=TINY).jobs[0]
    time.sleep(TINY + 0.02)
    queue.fetch(1)

    assert queue.nack(old.lease, delay=0, error="late") is False
    assert queue.dead(old.lease, "error", error="late") is False
    assert places(queue, job_id) == ["active"]
    assert stats(queue).counters["stale_refused"] == 2


def test_stale_lease_token_cannot_extend(make_queue):
    queue = make_queue()
    (job_id,) = enqueue(queue, 1)
    old = queue.fetch(1, lease_seconds=TINY).jobs[0]
    time.sleep(TINY + 0.02)
    new = queue.fetch(1, lease_seconds=5.0).jobs[0]
    deadline = explain(queue, job_id).lease_deadline

    refused = queue.extend([old.lease], lease_seconds=60)

    assert refused == [job_id]
    assert explain(queue, job_id).lease_deadline == deadline
    assert explain(queue, job_id).lease_token == new.token
    assert stats(queue).counters["stale_extends"] == 1


def test_forged_or_finished_tokens_are_refused(make_queue):
    queue = make_queue()
    (job_id,) = enqueue(queue, 1)
    job = queue.fetch(1).jobs[0]

    assert queue.ack([Lease(job_id, "999999:forged")]).refused == [job_id]
    assert queue.ack([job.lease]).acked == [job_id]
    assert queue.ack([job.lease]).refused == [job_id]  # a second ack of a finished job
    assert queue.ack([Lease("no-such-job", job.token)]).refused == ["no-such-job"]
    assert stats(queue).counters["succeeded"] == 1


def test_extend_keeps_a_job_leased_past_its_original_deadline(make_queue):
    queue = make_queue()
    (job_id,) = enqueue(queue, 1)
    job = queue.fetch(1, lease_seconds=0.3).jobs[0]

    for _ in range(4):
        time.sleep(0.15)
        assert queue.extend([job.lease], lease_seconds=0.3) == []
        assert queue.reap() == 0

    assert places(queue, job_id) == ["active"]
    assert queue.ack([job.lease]).acked == [job_id]


def test_expired_but_unreaped_lease_may_still_settle(make_queue):
    # nobody else holds the job yet, so its holder's ack is the truth
    queue = make_queue()
    (job_id,) = enqueue(queue, 1)
    job = queue.fetch(1, lease_seconds=TINY).jobs[0]
    time.sleep(TINY + 0.02)

    assert queue.ack([job.lease]).acked == [job_id]


def test_reap_returns_the_job_and_only_a_loss_while_it_ran_alone_counts(make_queue):
    queue = make_queue()
    (job_id,) = enqueue(queue, 1)
    others = enqueue(queue, 2)  # other jobs waiting behind it
    queue.fetch(1, lease_seconds=TINY)
    time.sleep(TINY + 0.02)

    assert queue.reap() == 1

    info = explain(queue, job_id)
    assert info.state == "ready" and info.attempts == 0  # a first loss is not charged
    assert info.last_failure["reason"] == "lease_expired"
    (again,) = queue.fetch(3, lease_seconds=TINY).jobs  # a suspect is leased alone
    assert (again.job_id, again.attempt) == (job_id, 1)  # reaped jobs go to the head
    time.sleep(TINY + 0.02)
    assert queue.reap() == 1
    assert explain(queue, job_id).attempts == 1  # lost again while alone: charged
    assert [j.job_id for j in queue.fetch(3).jobs] == [job_id]
    assert [j.job_id for j in queue.fetch(3).jobs] == others
    assert stats(queue).counters["reaped"] == 2


def test_jobs_lost_in_a_batch_are_not_charged_and_each_runs_alone_next(make_queue):
    queue = make_queue()
    ids = enqueue(queue, 5, max_attempts=1)
    assert len(queue.fetch(3, lease_seconds=TINY).jobs) == 3
    time.sleep(TINY + 0.02)

    assert queue.reap() == 3  # max_attempts 1, yet nobody is dead: nobody is charged

    batches = []
    while jobs := queue.fetch(10).jobs:
        batches.append([(j.job_id, j.attempt) for j in jobs])
    assert [len(b) for b in batches] == [1, 1, 1, 2]
    assert sorted(b[0] for b in batches[:3]) == sorted((i, 1) for i in ids[:3])
    assert sorted(batches[3]) == sorted((i, 1) for i in ids[3:])
    assert queue.dead_letters.size() == 0


def test_a_nack_ends_suspicion(make_queue):
    queue = make_queue()
    ids = enqueue(queue, 3)
    queue.fetch(1, lease_seconds=TINY)
    time.sleep(TINY + 0.02)
    queue.reap()
    (suspect,) = queue.fetch(3).jobs
    assert queue.nack(suspect.lease, delay=0) is True  # it ran and settled: no suspect

    assert sorted(j.job_id for j in queue.fetch(3).jobs) == sorted(ids)  # one batch


def test_reaped_and_released_jobs_go_back_in_their_original_order(make_queue):
    queue = make_queue()
    ids = enqueue(queue, 6)
    first = []
    for _ in range(3):  # leases expiring one after the other
        first += queue.fetch(1, lease_seconds=TINY).jobs
        time.sleep(0.002)
    time.sleep(TINY + 0.02)
    assert queue.reap() == 3

    def drain():  # the reaped three first, each alone (suspects), then the other three
        batches = []
        while jobs := queue.fetch(6).jobs:
            batches.append(jobs)
        return batches

    rest = drain()
    assert queue.release([j.lease for b in rest for j in b]) == 6

    assert [j.job_id for j in first] == ids[:3]
    expected = [[i] for i in ids[:3]] + [ids[3:]]
    assert [[j.job_id for j in b] for b in rest] == expected
    assert [[j.job_id for j in b] for b in drain()] == expected  # released: still suspects


def test_job_whose_worker_is_lost_at_every_attempt_ends_in_the_dlq_as_worker_lost(make_queue):
    queue = make_queue()
    (job_id,) = enqueue(queue, 1, max_attempts=3)

    deliveries = 0
    while True:
        fetched = queue.fetch(1, lease_seconds=TINY).jobs
        if not fetched:
            break
        deliveries += 1
        time.sleep(TINY + 0.02)

    assert deliveries == 4  # the first loss is not charged, then 3 alone
    letter = queue.dead_letters.show(job_id)
    assert letter.reason == "worker_lost" and letter.attempts == 3
    assert stats(queue).counters["dead:worker_lost"] == 1


def test_reap_never_falls_behind_a_small_reap_limit(make_queue):
    queue = make_queue(settings=QueueSettings(reap_limit=7))
    enqueue(queue, 50)
    assert len(queue.fetch(50, lease_seconds=TINY).jobs) == 50
    time.sleep(TINY + 0.02)

    assert queue.reap() == 50

    assert stats(queue).ready == 50 and stats(queue).active == 0


def test_many_reapers_at_once_requeue_each_expired_job_exactly_once(make_queue, redis_url):
    # fault 5: every worker ran timeout recovery; two could requeue one job, so it ran twice
    import redis

    n = 300
    queue = make_queue(settings=QueueSettings(reap_limit=20))
    ids = enqueue(queue, n)
    assert len(queue.fetch(n, lease_seconds=TINY).jobs) == n
    time.sleep(TINY + 0.02)
    clients = [redis.Redis.from_url(redis_url) for _ in range(12)]
    start = threading.Barrier(len(clients))
    fetched: list[list[str]] = []

    def reaper(i):
        from reliable_queue import Queue

        q = Queue(clients[i], queue.name, prefix=queue.keys.prefix, settings=queue.settings)
        start.wait()
        if i % 2:
            return q.reap(), []
        got = []
        while batch := q.fetch(7, lease_seconds=60).jobs:
            got.extend(j.job_id for j in batch)
        return 0, got

    try:
        with ThreadPoolExecutor(len(clients)) as pool:
            results = list(pool.map(reaper, range(len(clients))))
    finally:
        for c in clients:
            c.close()

    fetched = [job_id for _, got in results for job_id in got]
    assert len(fetched) == len(set(fetched)) == n  # each job handed out once more, no more
    assert stats(queue).counters["reaped"] == n
    attempts = queue.client.hmget(queue.keys.key("attempts"), ids)
    assert {int(a) for a in attempts} == {1}  # lost in a batch: uncharged, then leased
    assert stats(queue).ready == 0 and stats(queue).active == n


def test_concurrent_status_updates_never_overwrite_each_other(make_queue, redis_url):
    # fault 9: status was read-modify-written from Python, so racing updates overwrote
    import redis

    from reliable_queue import Queue

    queue = make_queue()
    (job_id,) = enqueue(queue, 1)
    job = queue.fetch(1).jobs[0]
    clients = [redis.Redis.from_url(redis_url) for _ in range(9)]
    start = threading.Barrier(len(clients))

    def settle(i):
        q = Queue(clients[i], queue.name, prefix=queue.keys.prefix, settings=queue.settings)
        start.wait()
        if i % 3 == 0:
            return ("ack", bool(q.ack([job.lease]).acked))
        if i % 3 == 1:
            return ("nack", q.nack(job.lease, delay=30))
        return ("dead", q.dead(job.lease, "error"))

    try:
        with ThreadPoolExecutor(len(clients)) as pool:
            results = list(pool.map(settle, range(len(clients))))
    finally:
        for c in clients:
            c.close()

    winners = [kind for kind, ok in results if ok]
    assert len(winners) == 1
    expected = {"ack": "done", "nack": "delayed", "dead": "dead"}[winners[0]]
    assert places(queue, job_id) == [expected]
    assert stats(queue).counters["stale_refused"] == len(results) - 1


def test_counters_stay_exact_under_concurrent_workers(make_queue, redis_url):
    import redis

    from reliable_queue import Queue

    queue = make_queue()
    enqueue(queue, 400)
    clients = [redis.Redis.from_url(redis_url) for _ in range(8)]

    def drain(i):
        q = Queue(clients[i], queue.name, prefix=queue.keys.prefix, settings=queue.settings)
        done = 0
        while jobs := q.fetch(5).jobs:
            ok = [j.lease for j in jobs if int(j.job_id[-1], 16) % 4]
            for j in jobs:
                if int(j.job_id[-1], 16) % 4 == 0:
                    q.dead(j.lease, "error")
            done += len(q.ack(ok).acked)
        return done

    try:
        with ThreadPoolExecutor(len(clients)) as pool:
            acked = sum(pool.map(drain, range(len(clients))))
    finally:
        for c in clients:
            c.close()

    s = stats(queue)
    assert s.counters["succeeded"] == acked == s.done
    assert s.counters["dead"] == s.dead == 400 - acked
    assert s.ready == s.active == 0


def test_release_hands_jobs_back_to_the_head_without_counting_an_attempt(make_queue):
    queue = make_queue()
    ids = enqueue(queue, 3)
    jobs = queue.fetch(3).jobs

    assert queue.release([j.lease for j in jobs[1:]]) == 2

    assert queue.ack([jobs[0].lease]).acked == [ids[0]]
    again = queue.fetch(2).jobs
    assert sorted(j.job_id for j in again) == sorted(ids[1:])
    assert {j.attempt for j in again} == {1}
    assert stats(queue).counters["released"] == 2


def test_failed_job_is_not_retried_before_its_backoff(make_queue):
    # fault 2: the backoff was computed, but the job went straight back to the ready list
    queue = make_queue()
    (job_id,) = enqueue(queue, 1)
    job = queue.fetch(1).jobs[0]

    assert queue.nack(job.lease, delay=0.4, error="flaky") is True

    assert places(queue, job_id) == ["delayed"]
    assert queue.fetch(1).jobs == []
    time.sleep(0.45)
    again = queue.fetch(1).jobs[0]
    assert (again.job_id, again.attempt) == (job_id, 2)
    assert stats(queue).counters["retried"] == 1


def test_fetch_reports_how_long_to_wait_for_the_next_due_job_or_lease(make_queue):
    queue = make_queue()
    assert queue.fetch(1).wait_seconds is None  # nothing pending at all

    queue.enqueue("t", {}, delay=5)
    assert queue.fetch(1).wait_seconds == pytest.approx(5, abs=0.1)

    queue.enqueue("t", {})
    queue.fetch(1, lease_seconds=1.0)
    assert queue.fetch(1).wait_seconds == pytest.approx(1.0, abs=0.1)


def test_a_split_fetch_holds_a_suspect_only_as_its_one_job(make_queue):
    # a fetch of more than SCRIPT_BATCH jobs is several script calls; the later ones
    # must not add batch-mates to a suspect the first call leased alone, nor lease one
    queue = make_queue()
    ids = enqueue(queue, SCRIPT_BATCH + 100)
    queue.fetch(1, lease_seconds=TINY)
    time.sleep(TINY + 0.02)
    assert queue.reap() == 1  # ids[0] is a suspect at the head
    # a job deep in the line whose last failure is a lease expiry is a suspect too
    deep = ids[SCRIPT_BATCH + 50]
    queue.client.hset(queue.keys.key("info"), deep, json.dumps({"reason": "lease_expired"}))

    assert [j.job_id for j in queue.fetch(2 * SCRIPT_BATCH).jobs] == [ids[0]]
    second = queue.fetch(2 * SCRIPT_BATCH).jobs  # a full first call, a later one stops
    assert [j.job_id for j in second] == ids[1 : SCRIPT_BATCH + 50]
    assert [j.job_id for j in queue.fetch(2 * SCRIPT_BATCH).jobs] == [deep]
    assert [j.job_id for j in queue.fetch(2 * SCRIPT_BATCH).jobs] == ids[SCRIPT_BATCH + 51 :]


def test_a_drain_holds_its_leases_in_hashed_keys_without_a_trace_of_the_pad(
    make_queue, redis_client
):
    # A compact (listpack) leases hash or active zset makes each lease, ack and heartbeat
    # a scan of every job held: a fetch of 32 jobs or more makes both keys hashed.
    queue = make_queue()
    enqueue(queue, 200)
    leases, active = queue.keys.key("leases"), queue.keys.key("active")

    first = queue.fetch(40).jobs
    second = queue.fetch(40).jobs  # the keys exist now: no pad needed, none left

    assert redis_client.object("encoding", leases) == b"hashtable"
    assert redis_client.object("encoding", active) == b"skiplist"
    held = {j.job_id for j in first + second}
    assert {k.decode() for k in redis_client.hkeys(leases)} == held
    assert {m.decode() for m in redis_client.zrange(active, 0, -1)} == held
    assert queue.ack([j.lease for j in first + second]).refused == []
    assert not redis_client.exists(leases, active)

    (small,) = queue.fetch(1).jobs  # a small fetch keeps them compact, and padless
    assert redis_client.object("encoding", leases) != b"hashtable"
    assert redis_client.hkeys(leases) == [small.job_id.encode()]
    assert queue.ack([small.lease]).refused == []
    again = queue.fetch(SCRIPT_BATCH).jobs  # made anew after they emptied: hashed again
    assert redis_client.object("encoding", leases) == b"hashtable"
    assert redis_client.object("encoding", active) == b"skiplist"
    assert redis_client.hlen(leases) == redis_client.zcard(active) == len(again) == 119
