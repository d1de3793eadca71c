"""The pause state as views read it from Redis, and the bounds of its texts (ADR 0031)."""

import pytest
from redis.crc import key_slot

from reliable_queue import InvalidTextError, QueueLimitError
from reliable_queue.keys import QueueKeys
from reliable_queue.pausing import (
    MAX_BY_CHARS,
    MAX_REASON_CHARS,
    PauseState,
    bounded_text,
    parse_state,
)


def test_the_paused_key_shares_the_queues_hash_slot():
    keys = QueueKeys("app", "orders")
    assert keys.paused == "app:{orders}:paused"
    assert key_slot(keys.paused.encode()) == key_slot(keys.key("ready").encode())


def test_a_stored_pause_reads_back_and_an_empty_hash_is_no_pause():
    raw = {b"since": b"1700000000123", b"by": b"ops@host", b"reason": b"down"}
    assert parse_state(raw) == PauseState(1700000000.123, "ops@host", "down")
    assert parse_state({}) is None and parse_state(None) is None


def test_a_foreign_pause_hash_is_read_without_raising_and_bounded():
    raw = {b"since": b"soon", b"by": b"\xff" * 5, b"reason": b"r" * 10_000, b"x": b"y"}
    state = parse_state(raw)
    assert state is not None and state.since is None
    assert state.by == "\\xff" * 5
    assert len(state.reason) == MAX_REASON_CHARS
    assert parse_state({b"since": b"9" * 40}).since is None


def test_texts_are_bounded_and_must_be_text():
    assert bounded_text("reason", None, MAX_REASON_CHARS) == ""
    assert bounded_text("by", "b" * MAX_BY_CHARS, MAX_BY_CHARS) == "b" * MAX_BY_CHARS
    with pytest.raises(QueueLimitError):
        bounded_text("by", "b" * (MAX_BY_CHARS + 1), MAX_BY_CHARS)
    with pytest.raises(QueueLimitError):
        bounded_text("reason", b"bytes", MAX_REASON_CHARS)  # type: ignore[arg-type]
    with pytest.raises(InvalidTextError):
        bounded_text("reason", "\ud800", MAX_REASON_CHARS)
