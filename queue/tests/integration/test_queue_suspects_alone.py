"""A suspect is leased only by a fetch whose caller runs nothing else (ADR 0021).

A fetch that is not ``alone`` (a lane beside other lanes of its process) leases no
suspect and says when one waits at the head; an ``alone`` fetch leases it as its one
job and marks it, and only such a job is charged when its lease expires.
"""

import dataclasses
import json
import time

import pytest

from reliable_queue import EnqueueRequest, QueueLimitError, explain, stats

TINY = 0.05  # seconds: a lease that expires during a short sleep


def enqueue(queue, n, **kw):
    return queue.enqueue_many([EnqueueRequest("t", {"i": i}, **kw) for i in range(n)])


def lose(queue, count, *, alone=True):
    """Lease ``count`` jobs with a tiny lease, let it expire and reap them."""
    jobs = queue.fetch(count, lease_seconds=TINY, alone=alone).jobs
    time.sleep(TINY + 0.02)
    assert queue.reap() == len(jobs)
    return jobs


def info_of(queue, job_id):
    return json.loads(queue.client.hget(queue.keys.key("info"), job_id))


def test_a_fetch_beside_other_lanes_leases_no_suspect_and_says_one_waits(make_queue):
    queue = make_queue()
    ids = enqueue(queue, 4)
    (lost,) = lose(queue, 1, alone=False)  # ids[0], now a suspect at the head

    waiting = queue.fetch(3, alone=False)
    assert (waiting.jobs, waiting.suspect_waiting, waiting.wait_seconds) == ([], True, None)
    assert queue.ids_in("ready")[-1] == lost.job_id  # still at the head, untouched

    (alone,) = queue.fetch(3, alone=True).jobs  # leased as its one job
    assert alone.job_id == ids[0]
    assert info_of(queue, ids[0])["alone"] is True
    rest = queue.fetch(3, alone=False)
    assert [j.job_id for j in rest.jobs] == ids[1:] and not rest.suspect_waiting


def test_a_batch_beside_other_lanes_stops_before_a_suspect(make_queue):
    queue = make_queue()
    ids = enqueue(queue, 5)
    queue.client.hset(queue.keys.key("info"), ids[2], json.dumps({"reason": "timed_out"}))

    first = queue.fetch(5, alone=False)
    assert [j.job_id for j in first.jobs] == ids[:2] and not first.suspect_waiting
    assert queue.fetch(5, alone=False).suspect_waiting
    assert [j.job_id for j in queue.fetch(5).jobs] == [ids[2]]
    assert [j.job_id for j in queue.fetch(5, alone=False).jobs] == ids[3:]
    assert not queue.fetch(5, alone=False).suspect_waiting  # nothing left at all


def test_only_a_suspect_leased_alone_in_its_process_is_charged_when_lost(make_queue):
    queue = make_queue()
    (job_id,) = enqueue(queue, 1, max_attempts=2)
    lose(queue, 1, alone=False)  # first loss, in a batch beside other lanes
    assert explain(queue, job_id).attempts == 0
    assert "alone" not in info_of(queue, job_id)

    lose(queue, 1)  # leased alone in its process, lost: charged
    info = explain(queue, job_id)
    assert (info.state, info.attempts) == ("ready", 1)
    assert info.last_failure["reason"] == "lease_expired"
    assert "alone" not in info.last_failure  # the mark lasts one delivery
    assert "ran alone in its process" in info.last_failure["error"]

    lose(queue, 1)  # max attempts: the loss is charged to it
    letter = queue.dead_letters.show(job_id)
    assert (letter.reason, letter.attempts) == ("worker_lost", 2)
    assert stats(queue).counters["dead:worker_lost"] == 1


def test_a_suspect_whose_info_cannot_be_written_back_is_marked_alone_all_the_same(
    make_queue,
):
    """The script makes the marked info before its first write: an info it can read
    but not encode again (a number beyond a double) is replaced by a short one."""
    queue = make_queue()
    (job_id,) = enqueue(queue, 1)
    raw = '{"reason": "lease_expired", "error": "lost", "n": 1e999}'
    queue.client.hset(queue.keys.key("info"), job_id, raw)

    (job,) = queue.fetch(2).jobs
    assert job.job_id == job_id
    assert info_of(queue, job_id) == {"reason": "lease_expired", "alone": True}
    assert explain(queue, job_id).state == "active"


def test_a_fetch_with_a_bad_suspect_mode_is_refused_with_nothing_written(make_queue):
    queue = make_queue()
    (job_id,) = enqueue(queue, 1)
    queue.fetch(1, lease_seconds=TINY)
    time.sleep(TINY + 0.02)  # an expired lease a fetch would reap
    call = queue.fetch_call(1, 1.0, "w")
    bad = dataclasses.replace(call, args=(*call.args[:-1], 2))

    with pytest.raises(QueueLimitError, match="suspect mode"):
        queue.scripts.run_many([bad])
    assert explain(queue, job_id).state == "active"
    assert stats(queue).counters["reaped"] == 0
