"""Retries and delays need nothing but ordinary worker processes (no scheduler)."""

import pytest
from queue_helpers import wait_until
from queue_worker_process import deliveries, effects

from reliable_queue import explain

pytestmark = pytest.mark.chaos


def test_job_failing_twice_retries_at_t_t_plus_1_and_t_plus_3(make_queue, spawn_worker, effects_db):
    # the scenario: backoff base 1 s, jitter off; the third attempt succeeds
    queue = make_queue()
    job_id = queue.enqueue("record", {"fail_times": 2}, max_attempts=5)
    spawn_worker(retry={"base_delay": 1.0, "jitter": False, "max_attempts": 5})

    wait_until(lambda: explain(queue, job_id).state == "done", timeout=15)

    runs = deliveries(effects_db)
    assert [r[2] for r in runs] == [1, 2, 3]
    t = runs[0][5]
    assert 1.0 <= runs[1][5] - t <= 1.4
    assert 3.0 <= runs[2][5] - t <= 3.5
    assert effects(effects_db) == [job_id]
