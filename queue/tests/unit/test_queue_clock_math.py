"""The queue clock's arithmetic (reliable_queue.clock), as the scripts do it (ADR 0022)."""

import pytest

from reliable_queue.clock import MAX_MS, SLEW, TOLERANCE_MS, field, queue_time_ms

NOW = 1_800_000_000_000  # ms
HOUR = 3_600_000


def test_without_an_offset_the_queue_clock_is_the_redis_clock():
    assert queue_time_ms(NOW, None, None) == (NOW, 0)
    assert queue_time_ms(NOW, NOW - 500, 0) == (NOW, 0)


def test_a_step_back_beyond_the_tolerance_continues_from_the_last_time_seen():
    assert queue_time_ms(NOW - HOUR, NOW, 0) == (NOW, HOUR)
    # within the tolerance the clock may go back a little, and no offset is taken
    assert queue_time_ms(NOW - TOLERANCE_MS, NOW, 0) == (NOW - TOLERANCE_MS, 0)


def test_the_offset_slews_back_to_zero_at_one_part_in_ten():
    last = NOW + HOUR  # written with offset HOUR at Redis time NOW
    q, off = queue_time_ms(NOW + 10_000, last, HOUR)
    assert (q, off) == (last + 10_000 - 10_000 // SLEW, HOUR - 10_000 // SLEW)
    # long after, the offset is gone and the clock is Redis's again, never going back
    assert queue_time_ms(NOW + 20 * HOUR, last, HOUR) == (NOW + 20 * HOUR, 0)


def test_the_slewed_clock_never_goes_back():
    last, off, prev = NOW + HOUR, HOUR, NOW + HOUR
    for redis_ms in range(NOW, NOW + 30_000, 7):
        q, _ = queue_time_ms(redis_ms, last, off)
        assert q >= prev
        prev = q


@pytest.mark.parametrize(
    ("raw", "value"),
    [(None, None), (b"12", 12), ("0", 0), (b"-1", None), (b"1.5", None), (b"", None),
     (str(MAX_MS).encode(), MAX_MS), (str(MAX_MS + 1).encode(), None), (b"\xff", None)],
)  # fmt: skip
def test_a_stored_field_is_an_integer_up_to_the_bound_or_unset(raw, value):
    assert field(raw) == value
