"""A fault that happened is reported as happened, even when Redis lost its count.

The chaos run kills the Redis its workers count in: a fault counted while Redis is
down (or in the AOF tail a crash drops) lost its counter increment, and the report
said "slow_handler was enabled but never happened" of a run where it did. The
workers also journal each injected fault in the attempt journal (a file), and the
report takes the larger count.
"""

from __future__ import annotations

from pathlib import Path

import redis

from orders.chaos.journal import read_journal, with_journaled_faults
from orders.chaos.report import missing_faults
from orders.chaos.setup import ChaosOptions
from orders.chaos.summary import RunFacts, fault_tallies
from orders.worker.counters import Counters, counters_key
from orders.worker.journal import AttemptJournal
from orders.worker.runner import injected_recorder


def slow_points_only() -> ChaosOptions:
    """Options with one fault on: 12% of points runs stall (every other kind off)."""
    return ChaosOptions(
        orders=10,
        kill_every=0,
        term_every=0,
        redis_kill_every=0,
        fail_rate=0,
        slow_rate=0.12,
        slow_ms=4000,
        slow_steps=("points",),
        crash_once_step=None,
        poison_step=None,
        hang_step=None,
        freeze_every=0,
        cancel=0,
        freeze_in_tx_rate=0,
        replay_every=0,
        evict_every=0,
        pause_step=None,
        limit_step=None,
    )


def test_a_fault_whose_redis_count_was_lost_still_happened(
    redis_client: redis.Redis, key_prefix: str, tmp_path: Path
) -> None:
    counters = Counters(redis_client, key_prefix)
    redis_client.set(counters_key(key_prefix), "not a hash")  # every HINCRBY now fails
    journal = AttemptJournal(tmp_path / "journal")
    record = injected_recorder(counters, journal)

    record("points", "slow")  # the counter's write is refused (logged), the line is kept
    journal.close()

    options = slow_points_only()
    facts = RunFacts(first_order_id=1)
    from_redis = {}  # what the report could read back from this Redis
    assert missing_faults(fault_tallies(options, facts, from_redis))  # the old verdict
    merged = with_journaled_faults(from_redis, read_journal(tmp_path / "journal"))
    assert merged == {"injected:slow:points": 1}
    assert missing_faults(fault_tallies(options, facts, merged)) == []


def test_the_larger_of_the_two_counts_is_kept() -> None:
    journal = read_journal(Path("/nonexistent"))
    journal.injected = {"injected:fail:stock": 2, "injected:slow:points": 5}
    merged = with_journaled_faults({"injected:fail:stock": 3, "applied:stock": 9}, journal)
    assert merged == {
        "injected:fail:stock": 3,  # a process killed before its journal line
        "injected:slow:points": 5,  # increments Redis lost
        "applied:stock": 9,
    }
