"""A job that kills its process is charged only when it ran alone in that process.

A worker process runs several lanes: ``concurrency`` lanes per queue, one set per
queue it serves. When a handler kills the process, every lane's jobs are lost with
it, so only a job that ran while nothing else ran in the process may be charged
(docs/adr/0021-poison-isolation-per-process.md). Innocent jobs run beside a job that
SIGKILLs its own process at every run, and the worker is restarted after each death.
"""

import signal
import time

import pytest
from queue_helpers import wait_until
from queue_worker_process import deliveries, effects

from reliable_queue import EnqueueRequest, explain, stats

pytestmark = pytest.mark.chaos

LEASE_HALF_S = {"lease_seconds": 0.5, "max_block_seconds": 0.25}
LAYOUTS = {
    # two lanes on one queue (concurrency 2)
    "two_lanes_one_queue": {"queues": ["jobs"], "concurrency": 2},
    # one lane on each of two queues (as `orders worker --all` serves its steps)
    "one_lane_on_each_of_two_queues": {"queues": ["jobs", "other"], "concurrency": 1},
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_a_poison_job_is_charged_only_while_alone_in_its_process(
    make_queue, spawn_worker, effects_db, layout
):
    spec = LAYOUTS[layout]
    queues = {name: make_queue(name) for name in spec["queues"]}
    jobs, beside = queues["jobs"], queues[spec["queues"][-1]]
    slow = [EnqueueRequest("record", {"sleep": 0.2}, max_attempts=3)]
    innocent = jobs.enqueue_many(slow * 3)
    poison = jobs.enqueue("suicide", {}, max_attempts=3)
    innocent += jobs.enqueue_many(slow * 9) + beside.enqueue_many(slow * 12)
    where = {job_id: q for q in queues.values() for job_id in q.ids_in("ready")}

    def settled() -> bool:
        return explain(jobs, poison).state == "dead" and all(
            explain(where[j], j).state in ("done", "dead") for j in innocent
        )

    deaths = 0
    deadline = time.monotonic() + 60
    while not settled():
        assert time.monotonic() < deadline, "supervised workers did not finish"
        proc = spawn_worker(batch_size=4, settings=LEASE_HALF_S, **spec)
        while proc.poll() is None and not settled():
            time.sleep(0.02)
        if proc.poll() is not None:
            assert proc.returncode == -signal.SIGKILL
            deaths += 1

    # the poison job, and only it, is dead-lettered; no innocent job was charged
    letter = jobs.dead_letters.show(poison)
    assert (letter.reason, letter.attempts, letter.task) == ("worker_lost", 3, "suicide")
    assert sum(q.dead_letters.size() for q in queues.values()) == 1
    charged = {j: explain(where[j], j).attempts for j in innocent}
    assert charged == dict.fromkeys(innocent, 1)
    wait_until(lambda: sorted(effects(effects_db)) == sorted(innocent), timeout=5)
    poison_runs = [d[2] for d in deliveries(effects_db) if d[0] == poison]
    assert poison_runs == [1, 1, 2, 3]  # the first loss uncharged, then 3 runs alone
    assert deaths == 4
    assert sum(stats(q).counters.get("dead:worker_lost", 0) for q in queues.values()) == 1
