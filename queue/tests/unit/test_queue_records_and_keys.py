"""JSON job records, job ids and key names: pure functions, no Redis."""

import pytest
from redis.crc import key_slot

from reliable_queue.codec import RecordDecodeError, decode_record, encode_record
from reliable_queue.ids import new_job_id
from reliable_queue.keys import KEY_ORDER, QueueKeys, validate_name


def test_record_round_trips_unicode_payloads_exactly():
    payload = {"text": "注文 🚚 ✓ naïve", "n": [1, 2.5, None, True], "nested": {"ü": "ß"}}

    record = decode_record(encode_record("ship", payload, 1_700_000_000_123, 3, "k-1"))

    assert record.task == "ship"
    assert record.payload == payload
    assert record.enqueued_at_ms == 1_700_000_000_123
    assert record.max_attempts == 3
    assert record.idempotency_key == "k-1"


def test_record_is_json_never_pickle():
    raw = encode_record("t", {"a": 1}, 0, 1, None)

    assert raw.startswith(b"{") and b'"t":"t"' in raw


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe not utf-8",
        b"{not json",
        b"[1, 2, 3]",
        b'"a string"',
        b'{"p": {}}',  # no task name
        b'{"t": "", "p": {}}',
        b'{"t": "x", "e": "yesterday"}',
        b'{"t": "x", "m": 2.5}',
    ],
)
def test_malformed_records_raise_record_decode_error(raw):
    with pytest.raises(RecordDecodeError):
        decode_record(raw)


def test_record_from_a_foreign_producer_gets_defaults_for_missing_fields():
    record = decode_record(b'{"t": "x", "p": {"a": 1}}')

    assert (record.enqueued_at_ms, record.max_attempts, record.idempotency_key) == (0, 1, None)


def test_unencodable_payload_raises_type_error():
    with pytest.raises(TypeError):
        encode_record("t", {"a": object()}, 0, 1, None)


def test_job_ids_are_unique_fixed_length_and_sort_by_creation_time():
    ids = [new_job_id(1_700_000_000.0 + i) for i in range(50)]

    assert len(set(ids)) == 50
    assert all(len(i) == 27 for i in ids)
    assert ids == sorted(ids)
    assert len({new_job_id(1.0) for _ in range(1000)}) == 1000  # same millisecond


def test_every_key_of_a_queue_carries_its_hash_tag_and_maps_to_one_slot():
    keys = QueueKeys("app", "orders")
    all_keys = [*keys.script_keys(), keys.idempotency_key("wf-1:stock")]

    assert len(keys.script_keys()) == len(KEY_ORDER) == 12
    assert all("{orders}" in k for k in all_keys)
    assert len({key_slot(k.encode()) for k in all_keys}) == 1


@pytest.mark.parametrize("bad", ["", "a b", "a{b", "a}b", "a:b", "tab\t"])
def test_queue_names_with_braces_colons_or_spaces_are_rejected(bad):
    with pytest.raises(ValueError):
        validate_name(bad)
    with pytest.raises(ValueError):
        QueueKeys("rq", bad)
