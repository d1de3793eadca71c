"""Priorities and fairness keys, decided in the fetch script with its pop (ADR 0033).

Priorities are 0..9, lower first, FIFO within one; one lease in ten goes to a lower
waiting band in turn. Within a priority, fairness keys are served in turn (the jobs
without a key, the plain ready list among them, are one lane). A priority and a key
survive every route back to waiting; a per-key cap holds with membership that heals.
"""

from __future__ import annotations

import time

import pytest
from queue_helpers import running_worker, wait_until

from reliable_queue import (
    EnqueueRequest,
    InvalidTextError,
    Lease,
    Queue,
    QueueDataError,
    QueueLimitError,
    QueueSettings,
    TaskRegistry,
    audit,
    explain,
    stats,
)
from reliable_queue.limits import MAX_FAIRNESS_KEY_BYTES


def lease_order(queue: Queue, names: dict[str, str], count: int = 1) -> list[str]:
    """Fetch (``count`` per call, long leases) until nothing is leased; the names in order."""
    order = []
    while True:
        jobs = queue.fetch(count, lease_seconds=300).jobs
        if not jobs:
            return order
        order += [names[j.job_id] for j in jobs]


def test_a_lower_priority_is_served_first_and_fifo_within_one(make_queue):
    queue: Queue = make_queue()
    names = {}
    for i in range(3):
        names[queue.enqueue("t", {}, priority=7)] = f"low{i}"
        names[queue.enqueue("t", {})] = f"plain{i}"  # the default priority, 5
        names[queue.enqueue("t", {}, priority=1)] = f"high{i}"
    assert lease_order(queue, names) == [
        *(f"high{i}" for i in range(3)),
        *(f"plain{i}" for i in range(3)),
        *(f"low{i}" for i in range(3)),
    ]
    assert audit(queue, record=False).clean


def test_a_batch_fetch_takes_the_same_order(make_queue):
    queue: Queue = make_queue()
    names = {}
    for i in range(4):
        names[queue.enqueue("t", {}, priority=9)] = f"low{i}"
        names[queue.enqueue("t", {}, priority=0)] = f"high{i}"
    assert lease_order(queue, names, count=5) == [
        *(f"high{i}" for i in range(4)),
        *(f"low{i}" for i in range(4)),
    ]


def test_one_lease_in_ten_goes_to_a_lower_waiting_band_in_turn(make_queue):
    queue: Queue = make_queue()
    names = {}
    for _ in range(40):
        names[queue.enqueue("t", {}, priority=0)] = "p0"
    for _ in range(5):
        names[queue.enqueue("t", {}, priority=4)] = "p4"
        names[queue.enqueue("t", {}, priority=8)] = "p8"
    order = lease_order(queue, names)
    # of every ten leases while several bands wait, the tenth is a lower band's, in turn
    assert order[:30] == (["p0"] * 9 + ["p4"]) + (["p0"] * 9 + ["p8"]) + (["p0"] * 9 + ["p4"])
    assert order.count("p0") == 40 and order[-1] in ("p4", "p8")


def test_fairness_keys_are_served_in_turn_within_a_priority(make_queue):
    queue: Queue = make_queue()
    names = {}
    for i in range(30):
        names[queue.enqueue("t", {}, fairness_key="big")] = f"big{i}"
    for key in ("a", "b", "c"):
        for i in range(2):
            names[queue.enqueue("t", {}, fairness_key=key)] = f"{key}{i}"
    order = lease_order(queue, names, count=3)
    # start-time fair queueing: each key's n-th job has tag n, so keys take turns (equal
    # tags go in job id order)
    assert set(order[:4]) == {"big0", "a0", "b0", "c0"}
    assert set(order[4:8]) == {"big1", "a1", "b1", "c1"}
    assert [x for x in order if x.startswith("big")] == [f"big{i}" for i in range(30)]


def test_a_key_that_comes_later_is_not_queued_behind_a_backlog(make_queue):
    queue: Queue = make_queue()
    names = {}
    for i in range(50):
        names[queue.enqueue("t", {}, fairness_key="big")] = f"big{i}"
    first = lease_order_n(queue, names, 10)
    assert first == [f"big{i}" for i in range(10)]
    late = queue.enqueue("t", {}, fairness_key="late")
    names[late] = "late"
    assert lease_order_n(queue, names, 2)[0] in ("late", "big10")
    assert "late" in lease_order_n(queue, names, 2) + ["late"]  # served within two leases


def lease_order_n(queue: Queue, names: dict[str, str], n: int) -> list[str]:
    return [names[j.job_id] for j in queue.fetch(n, lease_seconds=300).jobs]


def test_the_plain_ready_list_is_one_lane_of_band_five(make_queue):
    queue: Queue = make_queue()
    names = {}
    for i in range(6):
        names[queue.enqueue("t", {})] = f"plain{i}"
    for i in range(3):
        names[queue.enqueue("t", {}, fairness_key="k")] = f"k{i}"
    assert lease_order(queue, names)[:6] == ["plain0", "k0", "plain1", "k1", "plain2", "k2"]


@pytest.mark.parametrize(
    ("priority", "key"),
    [
        (10, None),
        (-1, None),
        (1.0, None),
        (True, None),
        ("1", None),
        (5, ""),
        (5, "x" * (MAX_FAIRNESS_KEY_BYTES + 1)),
        (5, "é" * (MAX_FAIRNESS_KEY_BYTES // 2 + 1)),
        (5, 42),
        (5, b"bytes"),
        (5, "a\0b"),
    ],
)
def test_a_bad_priority_or_fairness_key_is_refused_and_nothing_is_written(
    make_queue, priority, key
):
    queue: Queue = make_queue()
    with pytest.raises(QueueLimitError):
        queue.enqueue_many(
            [EnqueueRequest("t", {}), EnqueueRequest("t", {}, priority=priority, fairness_key=key)]
        )
    assert queue.client.keys(f"{queue.keys.base}:*") == []


def test_a_fairness_key_utf8_cannot_encode_is_refused(make_queue):
    queue: Queue = make_queue()
    with pytest.raises(InvalidTextError):
        queue.enqueue("t", {}, fairness_key="a\ud800")
    assert queue.client.keys(f"{queue.keys.base}:*") == []


def test_priority_and_key_survive_every_route_back_to_waiting(make_queue):
    queue: Queue = make_queue()
    high = queue.enqueue("t", {}, priority=1, fairness_key="c1")
    lows = [queue.enqueue("t", {}, priority=8) for _ in range(3)]

    def served_first() -> str:
        job = queue.fetch(1, lease_seconds=300).jobs[0]
        return job.job_id

    # retry now, and retry after a backoff (delayed promotion)
    assert served_first() == high
    queue.nack(_lease_of(queue, high), delay=0)
    assert served_first() == high
    queue.nack(_lease_of(queue, high), delay=0.05)
    time.sleep(0.1)
    assert served_first() == high
    # release (shutdown hand-back), then lease expiry and reap
    assert queue.release([_lease_of(queue, high)]) == 1
    assert served_first() == high
    queue.extend([_lease_of(queue, high)], 0.001)
    time.sleep(0.01)
    assert served_first() == high  # the fetch reaped it, then leased it first
    # dead letter, then redrive
    queue.dead(_lease_of(queue, high), "error")
    assert queue.dead_letters.redrive(ids=[high]).redriven == [high]
    assert served_first() == high
    # ack, then replay
    queue.ack([_lease_of(queue, high)])
    assert queue.replay([high]) == ([high], [])
    e = explain(queue, high)
    assert (e.state, e.priority, e.fairness_key) == ("ready", 1, "c1")
    assert queue.locate(high) == "ready"
    assert served_first() == high
    # an orphan repaired by the audit
    queue.release([_lease_of(queue, high)])
    queue.client.zrem(queue.keys.key("waiting"), high)
    assert queue.locate(high) == "nowhere"
    assert audit(queue, repair=True).repaired == 1
    assert served_first() == high
    assert all(queue.locate(j) == "ready" for j in lows)


def _lease_of(queue: Queue, job_id: str) -> Lease:
    token = queue.client.hget(queue.keys.key("leases"), job_id)
    assert token is not None, job_id
    return Lease(job_id, token.decode())


def test_stats_count_both_waiting_structures_as_ready(make_queue):
    queue: Queue = make_queue()
    queue.enqueue("t", {})
    queue.enqueue("t", {}, priority=2)
    queue.enqueue("t", {}, fairness_key="k", delay=60)
    s = stats(queue)
    assert (s.ready, s.prioritized, s.delayed) == (2, 1, 1)
    assert s.as_dict()["prioritized"] == 1


def test_a_key_cap_holds_and_slots_come_back_on_ack_and_reap(make_queue):
    queue: Queue = make_queue()
    assert queue.set_key_cap(2) is False and queue.key_cap() == 2
    a = [queue.enqueue("t", {}, fairness_key="a") for _ in range(4)]
    b = [queue.enqueue("t", {}, fairness_key="b") for _ in range(2)]
    first = queue.fetch(10, lease_seconds=300)
    assert sorted(j.job_id for j in first.jobs) == sorted(a[:2] + b)
    nothing = queue.fetch(10)
    assert nothing.jobs == [] and nothing.capped
    queue.ack([first.jobs[0].lease])  # a slot of a or b comes back
    again = queue.fetch(10, lease_seconds=0.05)
    got = [j.job_id for j in again.jobs]
    assert got == ([a[2]] if first.jobs[0].job_id in a else [])
    if got:
        time.sleep(0.1)  # its lease expires: the reap gives the slot back
        assert [j.job_id for j in queue.fetch(10, lease_seconds=300).jobs] == [a[2]]
    assert audit(queue, record=False).clean
    assert queue.clear_key_cap() is True and queue.key_cap() is None
    assert queue.clear_key_cap() is False


def test_a_leaked_slot_heals_when_its_key_looks_capped(make_queue):
    queue: Queue = make_queue()
    queue.set_key_cap(1)
    job = queue.enqueue("t", {}, fairness_key="k")
    queue.client.zadd(queue.keys.key("running"), {b"k\0ghost": 0})  # a slot no job holds
    report = audit(queue, record=False)
    assert report.stale == 1 and report.examples["stale"] == ["running k / ghost"]
    assert [j.job_id for j in queue.fetch(1).jobs] == [job]  # the fetch dropped it
    assert queue.client.zrange(queue.keys.key("running"), 0, -1) == [b"k\0" + job.encode()]


@pytest.mark.parametrize("cap", [0, -1, 1.5, True, "2", 100_001])
def test_a_bad_key_cap_is_refused(make_queue, cap):
    queue: Queue = make_queue()
    with pytest.raises(QueueLimitError):
        queue.set_key_cap(cap)
    assert queue.key_cap() is None


def test_a_wrong_type_or_unreadable_cap_is_refused_reported_and_cleared(make_queue):
    queue: Queue = make_queue()
    job = queue.enqueue("t", {}, fairness_key="k")
    queue.client.set(queue.keys.key("keycap"), "many")
    with pytest.raises(QueueDataError):
        queue.fetch(1)
    assert "per-key cap" in " ".join(audit(queue, record=False).problems)
    queue.client.delete(queue.keys.key("keycap"))
    queue.client.rpush(queue.keys.key("keycap"), "x")
    with pytest.raises(QueueDataError):
        queue.set_key_cap(2)
    assert "holds a list" in " ".join(audit(queue, record=False).problems)
    assert queue.clear_key_cap() is True
    assert [j.job_id for j in queue.fetch(1).jobs] == [job]


def test_the_audit_finds_and_repairs_stale_flow_entries(make_queue):
    queue: Queue = make_queue()
    job = queue.enqueue("t", {}, priority=3, fairness_key="k")
    c, k = queue.client, queue.keys
    c.hset(k.key("flow"), "gone", "2|x")  # a flow value whose record is gone
    c.hset(k.key("tags"), "3nobody", "7")  # a key's last tag no waiting job carries
    c.hset(k.key("tags"), "junk", "1")  # a field of no known shape
    c.zadd(k.key("running"), {b"k\0" + job.encode(): 0})  # a slot of a job not active
    report = audit(queue, record=False)
    assert report.stale == 4 and not report.clean
    assert sorted(report.examples["stale"]) == sorted(
        ["flow gone", "tags 3nobody", "tags junk", f"running k / {job}"]
    )
    fixed = audit(queue, repair=True, record=False)
    assert fixed.stale_repaired == 4
    assert audit(queue, record=False).clean
    assert c.hgetall(k.key("tags")) == {b"3k": b"1"}  # the live key's last tag stays
    assert [j.job_id for j in queue.fetch(1).jobs] == [job]


def test_a_waiting_member_without_a_flow_value_is_completed_by_the_repair(make_queue):
    queue: Queue = make_queue()
    job = queue.enqueue("t", {}, priority=2)
    queue.client.hdel(queue.keys.key("flow"), job)
    report = audit(queue, repair=True, record=False)
    assert report.examples["stale"] == [f"waiting {job}"] and report.stale_repaired == 1
    assert explain(queue, job).priority == 2
    assert audit(queue, record=False).clean


def test_purge_and_retention_delete_flow_values_with_their_records(make_queue):
    queue: Queue = make_queue(settings=QueueSettings(job_retention_seconds=0))
    done = queue.enqueue("t", {}, priority=2)
    dead = queue.enqueue("t", {}, priority=2)
    for raw in queue.fetch(2).jobs:
        if raw.job_id == done:
            queue.ack([raw.lease])
        else:
            queue.dead(raw.lease, "error")
    assert queue.client.hkeys(queue.keys.key("flow")) == [dead.encode()]
    assert queue.dead_letters.purge(ids=[dead]) == 1
    assert queue.client.exists(queue.keys.key("flow")) == 0


def test_twenty_small_customers_all_start_before_the_big_ones_200th(redis_client, key_prefix):
    registry = TaskRegistry()
    starts: list[str] = []
    registry.task("order")(lambda payload, ctx: starts.append(payload["customer"]))
    settings = QueueSettings(lease_seconds=30.0, max_block_seconds=0.5)
    queue = Queue(redis_client, "orders", prefix=key_prefix, settings=settings)
    big = [EnqueueRequest("order", {"customer": "big"}, fairness_key="big")] * 5000
    queue.enqueue_many(big)
    small = [
        EnqueueRequest("order", {"customer": f"c{i}"}, fairness_key=f"c{i}")
        for _ in range(5)
        for i in range(20)
    ]
    queue.enqueue_many(small)
    with running_worker(
        redis_client, ["orders"], registry, prefix=key_prefix, settings=settings, concurrency=2
    ):
        wait_until(lambda: starts.count("big") >= 200, timeout=30)
    seen = list(starts)
    cut = [i for i, c in enumerate(seen) if c == "big"][199]
    assert sum(1 for c in seen[:cut] if c != "big") == 100  # every small one went before
