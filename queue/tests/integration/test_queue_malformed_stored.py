"""A dead letter whose stored failure info or attempts has the wrong shape is listed,
shown and explained with the raw text, never an exception."""

import pytest

from reliable_queue import EnqueueRequest, explain

MALFORMED_INFO = [
    b"[1,2]",
    b'"just a string"',
    b"not json {",
    b"42",
    b'{"reason": [1], "error": 7}',
]


def dead_letter(queue):
    (job_id,) = queue.enqueue_many([EnqueueRequest("t", {"i": 1})])
    (job,) = queue.fetch(1).jobs
    assert queue.dead(job.lease, "error", error="boom")
    return job_id


@pytest.mark.parametrize("info", MALFORMED_INFO)
def test_malformed_failure_info_is_read_as_raw_text(make_queue, info):
    queue = make_queue()
    job_id = dead_letter(queue)
    queue.client.hset(queue.keys.key("info"), job_id, info)

    (listed,) = queue.dead_letters.list()
    shown = queue.dead_letters.show(job_id)
    explained = explain(queue, job_id)

    for letter in (listed, shown):
        assert letter.job_id == job_id and letter.payload == {"i": 1}
        assert isinstance(letter.reason, str) and isinstance(letter.error, str)
    if info.startswith(b"{"):
        assert shown.reason == "[1]" and shown.error == "7" and shown.malformed == {}
        assert explained.dead_reason == "[1]"
    else:
        assert shown.malformed == {"info": info.decode()} and shown.error == info.decode()
        assert explained.malformed == {"info": info.decode()}
        assert explained.last_failure is None and explained.state == "dead"


@pytest.mark.parametrize("attempts", [b"three", b"1.5", b"-4", b"\xff\xfe"])
def test_attempts_that_are_not_an_integer_are_read_as_raw_text(make_queue, attempts):
    queue = make_queue()
    job_id = dead_letter(queue)
    queue.client.hset(queue.keys.key("attempts"), job_id, attempts)

    shown = queue.dead_letters.show(job_id)
    (listed,) = queue.dead_letters.list()
    explained = explain(queue, job_id)

    raw = attempts.decode("utf-8", "replace")
    for view in (shown, listed, explained):
        assert view.attempts == 0 and view.malformed == {"attempts": raw}
