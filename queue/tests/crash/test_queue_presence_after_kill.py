"""A worker process killed with SIGKILL reads as gone within one heartbeat interval, with
the last state it published (ADR 0043)."""

import signal
import time

import pytest
from queue_helpers import wait_until

from reliable_queue import workers

pytestmark = [pytest.mark.chaos, pytest.mark.slow]

LEASE_3S = {"lease_seconds": 3.0, "max_block_seconds": 0.5}  # heartbeat every 1 s
HEARTBEAT_SECONDS = 1.0


def test_a_killed_worker_reads_as_gone_within_one_heartbeat_with_its_last_state(
    make_queue, spawn_worker, redis_client, key_prefix
):
    queue = make_queue()
    job_id = queue.enqueue("record", {"sleep": 30})
    proc = spawn_worker(settings=LEASE_3S, concurrency=2)

    def busy():
        shown = workers(redis_client, key_prefix).workers
        return shown and shown[0].busy == 1 and shown[0].state == "running" and shown[0]

    before = wait_until(busy, timeout=30)
    assert before.pid == proc.pid

    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=10) == -signal.SIGKILL
    killed_at = time.monotonic()
    gone = wait_until(
        lambda: (w := workers(redis_client, key_prefix).workers[0]).state == "gone" and w,
        timeout=10,
        interval=0.02,
    )
    # the view judges by its last publish on the Redis clock: at most one heartbeat
    # interval after the kill (the rest is this loop's reading, on a loaded machine)
    assert time.monotonic() - killed_at <= HEARTBEAT_SECONDS + 0.25
    assert gone.heartbeat_age > HEARTBEAT_SECONDS - 0.05
    busy_lane = next(lane for lane in gone.lanes if lane.state == "busy")
    assert (busy_lane.job_id, busy_lane.task) == (job_id, "record")
    assert gone.exit_reason is None  # a killed process says nothing
