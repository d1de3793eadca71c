"""Due jobs are served first-in-first-out by due time."""

import time

from reliable_queue import EnqueueRequest


def test_3000_due_delayed_jobs_fetched_one_at_a_time_come_out_in_due_order(
    make_queue, redis_client
):
    queue = make_queue()
    n = 3000
    queue.enqueue_many([EnqueueRequest("t", {"i": i}, delay=0.05 + i * 0.0001) for i in range(n)])
    due = {
        member.decode(): score
        for member, score in redis_client.zrange(queue.keys.key("delayed"), 0, -1, withscores=True)
    }
    assert len(due) == n
    time.sleep(0.5)  # every one is due

    order = []
    while jobs := queue.fetch(1, lease_seconds=60).jobs:
        order.append(jobs[0].job_id)

    assert len(order) == n
    times = [due[job_id] for job_id in order]
    assert times == sorted(times)  # never a later-due job before an earlier-due one
    earliest = set(sorted(due, key=due.__getitem__)[:1000])
    positions = [i for i, job_id in enumerate(order) if job_id in earliest]
    assert sum(positions) / len(positions) < 600  # the issue saw ~2,500


def test_a_zero_delay_retry_goes_behind_the_due_jobs_already_waiting(make_queue):
    queue = make_queue()
    first, second = queue.enqueue_many([EnqueueRequest("t", {}), EnqueueRequest("t", {})])
    (job,) = queue.fetch(1).jobs
    assert job.job_id == first
    assert queue.nack(job.lease, delay=0) is True

    assert [j.job_id for j in queue.fetch(1).jobs] == [second]
    assert [j.job_id for j in queue.fetch(1).jobs] == [first]
