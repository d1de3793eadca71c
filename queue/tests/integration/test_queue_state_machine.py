"""Model-based test: the job state machine in Redis against a plain Python model.

Hypothesis drives random sequences of enqueue / enqueue_many (with and without
idempotency keys, delays) / fetch (counts up to 10,000) / ack / nack / dead / release /
redrive / purge / replay / extend / reap / pause / resume / stale settlements / lease
expiry (a lost worker) / SCRIPT FLUSH / a wrong-type key planted in the way of a write / a data loss
(the queue's keys DUMPed, later RESTOREd, as an AOF rollback or a failover to a
lagging replica does); after every step the audit finds nothing, each job sits in
exactly the structure the model says, the counters agree, and every fencing number
handed out is above every one handed out before, across the data losses (ADR 0022).

The model states the rule for jobs lost with their worker (ADR 0002): every delivery
counts an attempt at fetch; a reaped job that was a *suspect* keeps the charge (and at
max attempts is dead, ``worker_lost``), any other reaped job gets the attempt back and
becomes a suspect. A run that timed out makes a suspect too (a nack with reason
``timed_out``, or a release recording it: a batch whose shared call timed out, ADR
0005). Any other nack, a dead letter, redrive or replay ends suspicion; a release
keeps it. A fetch leases a suspect only as its one job, and only when it is ``alone``
(its caller runs nothing else in its process, ADR 0021); one that is not says so when
a suspect at the head leaves it empty (see ``expected_fetch``). A paused queue's fetch
leases nothing and says so when jobs wait; reaping, settlements and promotion go on, and
a resume restores fetching as it was (ADR 0031). A rate limit (ADR 0032; hour-long
windows here, so none reopens during a run) lets a fetch lease at most what its window
still allows: setting or changing one opens a new window at the next fetch, clearing it
lifts it, and a fetch it allows none says ``rate_limited`` (when jobs wait) and counts
it, charging no attempt.

CI runs a fixed, small example budget. A longer run:

    QUEUE_STATEFUL_EXAMPLES=2000 uv run pytest \
        queue/tests/integration/test_queue_state_machine.py -q
"""

import copy
import itertools
import os
import time
from dataclasses import dataclass

import pytest
import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from reliable_queue import EnqueueRequest, Lease, Queue, QueueDataError, QueueSettings, audit, stats
from reliable_queue.execution import fencing_number
from reliable_queue.limits import SCRIPT_BATCH

#: Examples per run; CI keeps the default small, a longer run sets the variable.
EXAMPLES = int(os.environ.get("QUEUE_STATEFUL_EXAMPLES", "40"))

TINY = 0.001  # lease seconds; a sleep of a few ms expires it
LONG = 3600.0


def redis_ms(client: redis.Redis) -> int:
    """Redis TIME in ms."""
    sec, usec = client.time()
    return sec * 1000 + usec // 1000


@dataclass
class Job:
    state: str  # ready | delayed | active | dead | done
    attempts: int
    max_attempts: int
    token: str | None = None
    expired: bool = False
    suspect: bool = False  # lost with a worker and not settled since: leased alone


# 40 examples take 12-60 s on 2 cores; a loaded machine has taken over 120 s
@pytest.mark.timeout(600)
def test_job_state_machine_matches_a_simple_model(redis_url, key_prefix, monkeypatch):
    client = redis.Redis.from_url(redis_url)
    names = itertools.count()
    # Hypothesis replays a failing run and needs it to behave the same: job ids are
    # random, and Redis breaks ties (equal lease deadlines) by id, so number them instead.
    serial = itertools.count()
    monkeypatch.setattr("reliable_queue.queue.new_job_id", lambda now=None: f"{next(serial):08d}")

    class JobStateMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            nonlocal serial
            serial = itertools.count()
            self.queue = Queue(
                client,
                f"sm{next(names)}",
                prefix=key_prefix,
                settings=QueueSettings(lease_seconds=LONG, job_retention_seconds=LONG),
            )
            self.jobs: dict[str, Job] = {}
            self.keyed: dict[str, str] = {}  # idempotency key -> first job id
            self.stale: list[Lease] = []
            self.counters = dict.fromkeys(
                ("enqueued", "succeeded", "retried", "dead", "reaped", "stale_refused",
                 "stale_extends", "released", "redriven", "purged", "replayed",
                 "rate_limited"),
                0,
            )  # fmt: skip
            # fencing numbers in the order they were handed out (never rolled back), how
            # many the invariant checked, and the largest of those
            self.fences: list[int] = []
            self.fences_checked = 0
            self.max_fence = 0
            self.issued: list[tuple[str, str]] = []  # (job id, lease token), as fenced
            self.paused = False
            # the rate limit in force: [n, used in the window], None when none is set
            self.limit: list[int] | None = None

        def teardown(self) -> None:
            keys = list(client.scan_iter(match=f"{self.queue.keys.base}:*"))
            if keys:
                client.unlink(*keys)

        # ------------------------------------------------------------- helpers
        def in_state(self, state: str) -> list[str]:
            return sorted(i for i, j in self.jobs.items() if j.state == state)

        def leave_active(self, job_id: str, state: str) -> None:
            job = self.jobs[job_id]
            self.stale.append(Lease(job_id, job.token))
            job.state, job.token, job.expired = state, None, False

        def reap_model(self) -> None:
            for job_id, job in self.jobs.items():
                if job.state == "active" and job.expired:
                    self.counters["reaped"] += 1
                    if job.suspect and job.attempts >= max(job.max_attempts, 1):
                        self.leave_active(job_id, "dead")
                        self.counters["dead"] += 1
                    else:
                        if not job.suspect:  # not charged: it may never have started
                            job.attempts = max(job.attempts - 1, 0)
                        job.suspect = True
                        self.leave_active(job_id, "ready")

        def expected_fetch(
            self, line: list[str], count: int, alone: bool = True
        ) -> tuple[list[str], bool]:
            """The ids one fetch of ``count`` leases from ``line`` (head first), and
            whether it says a suspect waits.

            The fetch is ``ceil(count / SCRIPT_BATCH)`` script calls. The first pops up to
            its count and ends before the first suspect, or (``alone``) leases a suspect at
            its head alone; the others are sent only if the first came back full, and end
            before any suspect. So a fetch holds at most one suspect, and only as its one
            job. A fetch that leased nothing because of a suspect at the head says so.
            """
            sizes = [min(SCRIPT_BATCH, count - i) for i in range(0, count, SCRIPT_BATCH)]
            got: list[str] = []
            for part, n in enumerate(sizes):
                take: list[str] = []
                for job_id in line[:n]:
                    if self.jobs[job_id].suspect:
                        if part == 0 and not take and alone:
                            take.append(job_id)
                        break
                    take.append(job_id)
                line = line[len(take) :]
                got += take
                if part == 0 and len(take) < n:
                    break
            waiting = not got and bool(line) and self.jobs[line[0]].suspect
            return got, waiting

        def pick(self, data, state: str) -> str:
            return data.draw(st.sampled_from(self.in_state(state)))

        # --------------------------------------------------------------- rules
        @rule(n=st.integers(1, 3), delayed=st.booleans(), max_attempts=st.integers(0, 3))
        def enqueue(self, n, delayed, max_attempts):
            ids = self.queue.enqueue_many(
                [
                    EnqueueRequest("t", {}, delay=LONG if delayed else 0, max_attempts=max_attempts)
                    for _ in range(n)
                ]
            )
            for job_id in ids:
                self.jobs[job_id] = Job("delayed" if delayed else "ready", 0, max_attempts)
            self.counters["enqueued"] += n

        @rule(
            keys=st.lists(st.sampled_from(["k0", "k1", "k2", None]), min_size=1, max_size=4),
            delayed=st.booleans(),
        )
        def enqueue_with_keys(self, keys, delayed):
            requests = [
                EnqueueRequest("t", {}, idempotency_key=k, delay=LONG if delayed else 0)
                for k in keys
            ]
            ids = self.queue.enqueue_many(requests)
            for key, job_id in zip(keys, ids, strict=True):
                if key is not None and key in self.keyed:
                    assert job_id == self.keyed[key]  # a duplicate: the first job's id
                    continue
                assert job_id not in self.jobs
                if key is not None:
                    self.keyed[key] = job_id
                self.jobs[job_id] = Job("delayed" if delayed else "ready", 0, 5)
                self.counters["enqueued"] += 1

        @rule(
            count=st.one_of(st.integers(1, 4), st.sampled_from([999, 1000, 1001, 4500, 10_000])),
            tiny=st.booleans(),
            alone=st.booleans(),
        )
        def fetch(self, count, tiny, alone):
            self.reap_model()
            self.queue.reap()
            ready = client.lrange(self.queue.keys.key("ready"), 0, -1)
            line = [r.decode() for r in reversed(ready)]  # the head (next to pop) first
            result = self.queue.fetch(count, lease_seconds=TINY if tiny else LONG, alone=alone)
            allowed = count if self.limit is None else self.limit[0] - self.limit[1]
            limited = not self.paused and allowed == 0 and bool(line)
            if self.paused or limited:  # nothing is leased; the reply says so when jobs wait
                expected, waiting = [], False
            else:  # a limit cuts the line before the suspect rule (below 500: one call)
                expected, waiting = self.expected_fetch(line, min(count, allowed), alone)
            assert [raw.job_id for raw in result.jobs] == expected
            assert result.suspect_waiting == waiting
            assert result.paused == (self.paused and bool(line))
            assert result.rate_limited == limited
            self.counters["rate_limited"] += limited
            if self.limit is not None:
                self.limit[1] += len(result.jobs)
            for raw in result.jobs:
                job = self.jobs[raw.job_id]
                job.attempts += 1
                assert raw.attempt == job.attempts
                job.state, job.token, job.expired = "active", raw.token, False
                self.fences.append(fencing_number(raw.token))
                self.issued.append((raw.job_id, raw.token))
            if tiny and result.jobs:
                time.sleep(0.004)
                for raw in result.jobs:
                    self.jobs[raw.job_id].expired = True

        @rule()
        def reap(self):
            expected = sum(1 for j in self.jobs.values() if j.state == "active" and j.expired)
            self.reap_model()
            assert self.queue.reap() == expected

        @precondition(lambda self: self.in_state("active"))
        @rule(data=st.data())
        def ack(self, data):
            job_id = self.pick(data, "active")
            result = self.queue.ack([Lease(job_id, self.jobs[job_id].token)])
            assert result.acked == [job_id]
            self.leave_active(job_id, "done")
            self.counters["succeeded"] += 1

        @precondition(lambda self: self.in_state("active"))
        @rule(data=st.data(), delayed=st.booleans(), timed_out=st.booleans())
        def nack(self, data, delayed, timed_out):
            job_id = self.pick(data, "active")
            lease = Lease(job_id, self.jobs[job_id].token)
            reason = "timed_out" if timed_out else "retry"
            assert self.queue.nack(lease, delay=LONG if delayed else 0, reason=reason) is True
            self.jobs[job_id].suspect = timed_out  # a run that timed out is leased alone
            self.leave_active(job_id, "delayed" if delayed else "ready")
            self.counters["retried"] += 1

        @precondition(lambda self: self.in_state("active"))
        @rule(data=st.data())
        def dead(self, data):
            job_id = self.pick(data, "active")
            assert self.queue.dead(Lease(job_id, self.jobs[job_id].token), "error") is True
            self.jobs[job_id].suspect = False
            self.leave_active(job_id, "dead")
            self.counters["dead"] += 1

        @precondition(lambda self: self.in_state("active"))
        @rule(data=st.data(), timed_out=st.booleans())
        def release(self, data, timed_out):
            job_id = self.pick(data, "active")
            lease = Lease(job_id, self.jobs[job_id].token)
            # a batch whose shared call timed out is released with timed_out as its failure
            info = self.queue.failure_info("timed_out", "", "") if timed_out else None
            assert self.queue.release([lease], info=info) == 1
            self.jobs[job_id].attempts -= 1
            self.jobs[job_id].suspect = self.jobs[job_id].suspect or timed_out
            self.leave_active(job_id, "ready")
            self.counters["released"] += 1

        @precondition(lambda self: self.in_state("active"))
        @rule(data=st.data())
        def extend(self, data):
            job_id = self.pick(data, "active")
            assert self.queue.extend([Lease(job_id, self.jobs[job_id].token)], LONG) == []
            self.jobs[job_id].expired = False  # even an expired, unreaped lease revives

        @precondition(lambda self: self.in_state("dead"))
        @rule(data=st.data())
        def redrive(self, data):
            job_id = self.pick(data, "dead")
            assert self.queue.dead_letters.redrive(ids=[job_id]).redriven == [job_id]
            job = self.jobs[job_id]
            job.state, job.attempts, job.suspect = "ready", 0, False
            self.counters["redriven"] += 1

        @precondition(lambda self: self.in_state("dead"))
        @rule(data=st.data())
        def purge(self, data):
            job_id = self.pick(data, "dead")
            assert self.queue.dead_letters.purge(ids=[job_id]) == 1
            del self.jobs[job_id]
            self.counters["purged"] += 1

        @precondition(lambda self: self.in_state("done"))
        @rule(data=st.data())
        def replay(self, data):
            job_id = self.pick(data, "done")
            assert self.queue.replay([job_id]) == ([job_id], [])
            job = self.jobs[job_id]
            job.state, job.attempts, job.suspect = "ready", 0, False
            self.counters["replayed"] += 1

        @rule(data=st.data(), count=st.integers(1, 4))
        def lose_the_writes_of_a_few_steps(self, data, count):
            # Redis comes back as it was a few steps ago, as after an AOF cut back by a
            # host crash or a failover to a replica that lagged: snapshot the queue's
            # keys (DUMP) and the model, lease (and maybe settle) some jobs, RESTORE
            keys = list(client.scan_iter(match=f"{self.queue.keys.base}:*"))
            pipe = client.pipeline(transaction=True)
            for key in keys:
                pipe.dump(key)
                pipe.pttl(key)
            replies = pipe.execute()
            dumped = [
                (key, max(replies[2 * i + 1], 0), replies[2 * i])
                for i, key in enumerate(keys)
                if replies[2 * i] is not None
            ]
            model = copy.deepcopy(
                (self.jobs, self.keyed, self.stale, self.counters, self.paused, self.limit)
            )
            leased = len(self.fences)
            self.enqueue(n=1, delayed=False, max_attempts=3)
            self.fetch(count=count, tiny=False, alone=True)
            if self.in_state("active") and data.draw(st.booleans()):  # (none while paused)
                self.ack(data)
            lost = [Lease(*pair) for pair in self.issued[leased:]]
            keys = list(client.scan_iter(match=f"{self.queue.keys.base}:*"))
            pipe = client.pipeline(transaction=True)
            if keys:
                pipe.unlink(*keys)
            for key, ttl, value in dumped:
                pipe.restore(key, ttl, value)
            pipe.execute()
            self.jobs, self.keyed, self.stale, self.counters, self.paused, self.limit = model
            self.stale += lost  # the leases of the lost steps are stale now
            # a restart takes longer than the numbers ran ahead of the clock (they do
            # only past 1,000 leases per ms): wait for the Redis clock to pass them
            give_up = time.monotonic() + 1.0
            while (
                max(self.fences, default=0) >= redis_ms(client) * 1000
                and time.monotonic() < give_up
            ):
                time.sleep(0.001)
            self.enqueue(n=1, delayed=False, max_attempts=3)
            self.fetch(count=count, tiny=False, alone=True)  # leases again, with fresh numbers

        @rule(reason=st.sampled_from([None, "", "maintenance", "\x1b[2J"]))
        def pause(self, reason):
            state = self.queue.pause(reason=reason, by="model")
            assert state.reason == (reason or "") and state.by == "model"
            self.paused = True

        @rule()
        def resume(self):
            assert self.queue.resume() is self.paused
            self.paused = False

        @rule(n=st.integers(1, 5))
        def set_limit(self, n):
            assert self.queue.set_limit(n, LONG) is (self.limit is not None)
            self.limit = [n, 0]  # a new window opens at the next fetch

        @rule()
        def clear_limit(self):
            assert self.queue.clear_limit() is (self.limit is not None)
            self.limit = None

        @rule()
        def script_flush(self):
            client.script_flush()  # as after a restart or failover: scripts reload

        @rule(
            where=st.sampled_from(
                ["idempotency", "done", "delayed", "stats", "dead", "paused", "limit"]
            ),
            data=st.data(),
        )
        def wrong_type_key_in_the_way(self, where, data):
            k = self.queue.keys
            if where == "idempotency":
                planted = k.idempotency_key("planted")
                client.rpush(planted, "x")
                with pytest.raises(QueueDataError):
                    self.queue.enqueue_many(
                        [EnqueueRequest("t", {}, "fresh-key"), EnqueueRequest("t", {}, "planted")]
                    )
                client.delete(planted)
                assert client.exists(k.idempotency_key("fresh-key")) == 0
                return
            # swap the structure for a wrong-type key, try the write, put it back
            key, aside = k.key(where), k.key("aside")
            existed = client.exists(key)
            if existed:
                client.rename(key, aside)
            client.set(key, "planted")
            try:
                active = self.in_state("active")
                with pytest.raises(QueueDataError):
                    if where in ("done", "stats") and active:
                        job_id = data.draw(st.sampled_from(active))
                        self.queue.ack([Lease(job_id, self.jobs[job_id].token)])
                    elif where == "dead" and active:
                        job_id = data.draw(st.sampled_from(active))
                        self.queue.dead(Lease(job_id, self.jobs[job_id].token), "error")
                    elif where in ("done", "dead"):
                        self.queue.maintain()  # the bounded trims touch both
                    elif where == "paused":
                        self.queue.pause()
                    elif where == "limit":
                        self.queue.set_limit(1, LONG)
                    else:
                        self.queue.enqueue("t", {}, delay=LONG)
            finally:
                client.delete(key)
                if existed:
                    client.rename(aside, key)

        @precondition(lambda self: self.stale)
        @rule(data=st.data(), how=st.sampled_from(["ack", "nack", "dead", "extend"]))
        def settle_with_a_stale_token(self, data, how):
            lease = data.draw(st.sampled_from(self.stale))
            if how == "ack":
                assert self.queue.ack([lease]).refused == [lease.job_id]
            elif how == "nack":
                assert self.queue.nack(lease) is False
            elif how == "dead":
                assert self.queue.dead(lease, "error") is False
            else:
                assert self.queue.extend([lease], LONG) == [lease.job_id]
            self.counters["stale_extends" if how == "extend" else "stale_refused"] += 1

        # ---------------------------------------------------------- invariants
        @invariant()
        def every_job_is_in_exactly_the_place_the_model_says(self):
            k = self.queue.keys
            pipe = client.pipeline(transaction=True)
            pipe.lrange(k.key("ready"), 0, -1)
            for kind in ("delayed", "active", "dead", "done"):
                pipe.zrange(k.key(kind), 0, -1)
            pipe.hgetall(k.key("attempts"))
            ready, delayed, active, dead, done, attempts = pipe.execute()
            places = {"ready": ready, "delayed": delayed, "active": active}
            places.update(dead=dead, done=done)
            seen: dict[str, str] = {}
            for state, ids in places.items():
                for raw in ids:
                    job_id = raw.decode()
                    assert job_id not in seen, f"{job_id} in {seen[job_id]} and {state}"
                    seen[job_id] = state
            assert seen == {i: j.state for i, j in self.jobs.items()}
            for job_id, job in self.jobs.items():
                assert int(attempts.get(job_id.encode(), 0)) == job.attempts, job_id

        @invariant()
        def fencing_numbers_only_grow_across_data_losses(self):
            for number in self.fences[self.fences_checked :]:
                assert number > self.max_fence, (number, self.max_fence)
                self.max_fence = number
            self.fences_checked = len(self.fences)

        @invariant()
        def the_pause_state_is_the_models(self):
            state = self.queue.paused()
            assert (state is not None) == self.paused
            assert (stats(self.queue).paused is not None) == self.paused

        @invariant()
        def the_rate_limit_is_the_models(self):
            limit = self.queue.rate_limit()
            assert (limit and limit.n) == (self.limit and self.limit[0])
            assert stats(self.queue).rate_limit == limit

        @invariant()
        def the_audit_finds_nothing(self):
            report = audit(self.queue, step=3, record=False)
            assert report.clean and report.complete, report.as_dict()

        @invariant()
        def counters_and_depths_match_the_model(self):
            s = stats(self.queue)
            assert {k: s.counters[k] for k in self.counters} == self.counters
            for state in ("ready", "delayed", "active", "dead", "done"):
                assert getattr(s, state) == len(self.in_state(state)), state

    try:
        run_state_machine_as_test(
            JobStateMachine,
            settings=settings(
                max_examples=EXAMPLES,
                stateful_step_count=40,
                deadline=None,
                database=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    finally:
        client.close()
