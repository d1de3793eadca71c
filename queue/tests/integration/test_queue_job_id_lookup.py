"""Job ids by prefix: exact ids always, unique prefixes of 6+ characters, ambiguity named."""

import pytest

from reliable_queue import AmbiguousJobIdError, JobIdNotFoundError, JobIdTooShortError, find_job


def test_a_unique_prefix_finds_the_job_and_its_queue(make_queue):
    points, stock = make_queue("points"), make_queue("stock")
    others = [stock.enqueue("t", {})]
    job_id = points.enqueue("t", {})
    others.append(points.enqueue("t", {}))
    # unique against both other jobs, the one in the other queue too
    unique = next(
        n for n in range(6, len(job_id)) if not any(o.startswith(job_id[:n]) for o in others)
    )

    match = find_job([stock, points], job_id[:unique])

    assert (match.queue.name, match.job_id) == ("points", job_id)


def test_an_exact_short_id_is_found_but_a_short_prefix_is_refused(make_queue):
    queue = make_queue()
    queue.client.hset(queue.keys.key("jobs"), "g1", "{}")
    assert find_job([queue], "g1").job_id == "g1"
    with pytest.raises(JobIdTooShortError, match="at least 6 characters"):
        find_job([queue], "g")


def test_an_ambiguous_prefix_lists_the_candidates(make_queue):
    queue = make_queue()
    ids = [queue.enqueue("t", {}, idempotency_key=f"k{i}") for i in range(3)]
    for job_id in ids:  # same prefix by construction: plant records that share 8 characters
        queue.client.hset(queue.keys.key("jobs"), "abcdef12" + job_id[8:], "{}")

    with pytest.raises(AmbiguousJobIdError) as caught:
        find_job([queue], "abcdef12")

    assert sorted(j for _, j in caught.value.candidates) == sorted("abcdef12" + j[8:] for j in ids)
    assert "give more characters" in str(caught.value)


def test_glob_characters_in_a_prefix_match_only_themselves(make_queue):
    queue = make_queue()
    queue.enqueue("t", {})
    with pytest.raises(JobIdNotFoundError):
        find_job([queue], "******")
    with pytest.raises(JobIdNotFoundError):
        find_job([queue], "[0-9a-f]?????")


def test_dead_only_finds_a_dead_letter_whose_record_is_gone(make_queue):
    queue = make_queue()
    job_id = queue.enqueue("t", {})
    leased = queue.fetch(1).jobs[0]
    assert queue.dead(leased.lease, "error", error="x")
    queue.client.hdel(queue.keys.key("jobs"), job_id)
    alive = queue.enqueue("t", {})

    assert find_job([queue], job_id[:20], dead_only=True).job_id == job_id
    with pytest.raises(JobIdNotFoundError, match="dead-letter queue"):
        find_job([queue], alive, dead_only=True)


def test_the_scan_is_bounded_per_lookup(make_queue, private_client):
    queue = make_queue(client=private_client)
    jobs = queue.keys.key("jobs")
    private_client.hset(jobs, mapping={f"zzzzzz{i:05d}": "{}" for i in range(5000)})

    def hscans() -> int:
        return private_client.info("commandstats").get("cmdstat_hscan", {}).get("calls", 0)

    before = hscans()
    with pytest.raises(JobIdNotFoundError, match="searched the first 1000 entries"):
        find_job([queue], "yyyyyy", scan_limit=1000)
    assert hscans() - before == 1
    private_client.hset(jobs, "yyyyyy-target", "{}")
    assert find_job([queue], "yyyyyy").job_id == "yyyyyy-target"
