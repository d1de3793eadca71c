"""The age of the longest-waiting job: read from the heads of the waiting structures."""

import time

from queue_helpers import FAST

from reliable_queue import Queue, oldest_waiting_seconds
from reliable_queue.inspection import WAITING_PER_BAND


class StepClock:
    """A wall clock the test moves by hand (epoch seconds)."""

    def __init__(self) -> None:
        self.now = float(int(time.time()))  # whole ms, as records store them

    def __call__(self) -> float:
        return self.now


def test_an_empty_queue_has_waited_nothing(make_queue):
    assert oldest_waiting_seconds(make_queue()) == 0.0


def test_the_job_next_in_line_counts_from_its_enqueue(redis_client, key_prefix):
    clock = StepClock()
    queue = Queue(redis_client, "jobs", prefix=key_prefix, settings=FAST, clock=clock)
    queue.enqueue("t", {"n": 1})
    clock.now += 40.0
    queue.enqueue("t", {"n": 2})
    clock.now += 5.0

    assert oldest_waiting_seconds(queue) == 45.0  # the first job is popped next
    queue.fetch(1)
    assert oldest_waiting_seconds(queue) == 5.0


def test_a_due_delayed_job_not_yet_promoted_counts_from_its_due_time(make_queue):
    queue = make_queue()
    queue.enqueue("t", {}, delay=0.05)
    assert oldest_waiting_seconds(queue) == 0.0  # not due yet: not waiting

    time.sleep(0.4)

    assert 0.3 <= oldest_waiting_seconds(queue) < 5.0


def test_unreadable_heads_read_as_nothing_waiting(make_queue):
    queue = make_queue()
    queue.client.lpush(queue.keys.key("ready"), "no-record")
    assert oldest_waiting_seconds(queue) == 0.0  # an id without a record
    queue.client.delete(queue.keys.key("ready"))
    queue.client.set(queue.keys.key("ready"), "a string")
    queue.client.set(queue.keys.key("delayed"), "a string")
    assert oldest_waiting_seconds(queue) == 0.0


def test_a_job_with_a_fairness_key_or_a_priority_counts_from_its_enqueue(redis_client, key_prefix):
    clock = StepClock()
    queue = Queue(redis_client, "jobs", prefix=key_prefix, settings=FAST, clock=clock)
    queue.enqueue("t", {"n": 1}, fairness_key="customer-1")  # waits in the waiting set
    clock.now += 30.0
    queue.enqueue("t", {"n": 2}, priority=9)
    clock.now += 15.0

    assert oldest_waiting_seconds(queue) == 45.0
    queue.fetch(1)  # the keyed job: band 5 before band 9
    assert oldest_waiting_seconds(queue) == 15.0
    queue.fetch(1)
    assert oldest_waiting_seconds(queue) == 0.0


def test_the_waiting_set_is_read_a_bounded_window_per_band(redis_client, key_prefix):
    clock = StepClock()
    queue = Queue(redis_client, "jobs", prefix=key_prefix, settings=FAST, clock=clock)
    for band in (0, 9):
        queue.enqueue("t", {"band": band}, priority=band, fairness_key="big")
    clock.now += 60.0
    for n in range(WAITING_PER_BAND * 2):  # a later backlog in band 9 behind the first
        queue.enqueue("t", {"n": n}, priority=9, fairness_key="big")
    assert oldest_waiting_seconds(queue) == 60.0
    queue.fetch(1)  # band 0's job: band 9's first is still within the window
    assert oldest_waiting_seconds(queue) == 60.0


def test_an_unreadable_waiting_set_reads_as_nothing_waiting_there(make_queue):
    queue = make_queue()
    queue.client.set(queue.keys.key("waiting"), "a string")
    assert oldest_waiting_seconds(queue) == 0.0
