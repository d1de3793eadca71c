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

Jobs with a priority or a fairness key wait in the waiting sorted set (ADR 0033); the
plain model ``FairModel`` keeps their start tags, the bands' last served tags, the share
rule's count and the per-key cap's running slots, and predicts every fetch's lease
order from them: lowest band first but every tenth lease (while lower bands wait) to a
lower band in turn, lowest tag within a band (the ready list being one lane of band 5),
a key at its cap passed over. A throttle (ADR 0034) within its budget hands the job
back uncharged (first in its band, now or when due), past it ends the attempt as a
retry or a dead letter. After every step the zset, the flow values, the tags and the
running slots are the model's, running is a subset of active, and the audit finds no
stale entry.

CI runs a fixed, small example budget. A longer run:

    QUEUE_STATEFUL_EXAMPLES=2000 uv run pytest \
        queue/tests/integration/test_queue_state_machine.py -q
"""

import copy
import itertools
import os
import time
from dataclasses import dataclass, field

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
from reliable_queue.limits import DEFAULT_PRIORITY, SCRIPT_BATCH

#: Examples per run; CI keeps the default small, a longer run sets the variable.
EXAMPLES = int(os.environ.get("QUEUE_STATEFUL_EXAMPLES", "40"))

TINY = 0.001  # lease seconds; a sleep of a few ms expires it
LONG = 3600.0
THROTTLES = 2  # free throttles per attempt (QueueSettings.max_throttles) in the machine

BAND = 2**48  # a waiting job's score: band * BAND + tag (lua/_common.lua)
SHARE_EVERY, SCAN_EXTRA = 10, 100  # lua/fetch.lua


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
    priority: int = DEFAULT_PRIORITY
    key: str | None = None  # fairness key
    throttles: int = 0  # this attempt's throttles (kept in its failure info)
    front: bool = False  # throttled, delayed: first in its band when due

    @property
    def flowing(self) -> bool:
        """Has a priority or a key: waits in the waiting zset, not the ready list."""
        return self.priority != DEFAULT_PRIORITY or self.key is not None

    def flow_value(self) -> str | None:
        """Its entry in the flow hash, or None for none."""
        if not self.flowing and not self.front:
            return None
        return ("f" if self.front else "") + f"{self.priority}|{self.key or ''}"


#: one pick of a fetch: job id, from the ready list, band, tag, key, share count and band
Pick = tuple[str, bool, int, int, str, int, int]


@dataclass
class FairModel:
    """The waiting zset and its fair-queueing state, as ADR 0033 states the rules."""

    wz: dict[str, tuple[int, int]] = field(default_factory=dict)  # job id -> (band, tag)
    v: list[int] = field(default_factory=lambda: [0] * 10)  # the bands' last served tags
    last: dict[tuple[int, str], int] = field(default_factory=dict)  # a key's last tag
    rlast: int = 0  # the ready list's last tag
    n: int = 0  # leases since the last share
    s: int = -1  # the band that had the last share

    def put(self, job_id: str, band: int, key: str, front: bool) -> None:
        """Back to wait: first in its band, or last of its key's lane."""
        if front:
            tag = max(self.v[band] - 1, 0)
        else:
            tag = max(self.v[band], self.last.get((band, key), 0)) + 1
            self.last[(band, key)] = tag
        self.wz[job_id] = (band, tag)

    def select(
        self, line: list[str], c: int, key_of, cap: int | None, running: dict[str, int]
    ) -> list[Pick]:
        """The picks of one fetch call of ``c`` from ``line`` (the ready list's tail,
        head first) and the zset; changes nothing."""
        v, rlast, n, s = list(self.v), self.rlast, self.n, self.s
        bands = sorted({b for b, _ in self.wz.values()} | ({5} if line else set()))
        windows = {}
        for b in bands:
            members = sorted((t, i) for i, (bb, t) in self.wz.items() if bb == b)
            windows[b] = [[i, t, key_of(i)] for t, i in members[: c + SCAN_EXTRA]]
        pos = dict.fromkeys(bands, 0)
        count = dict(running)
        rpos = 0

        def zcand(b):
            w = windows[b]
            while pos[b] < len(w) and cap and w[pos[b]][2] and count.get(w[pos[b]][2], 0) >= cap:
                pos[b] += 1
            return pos[b] if pos[b] < len(w) else None

        def has(b):
            return (b == 5 and rpos < len(line)) or zcand(b) is not None

        picks: list[Pick] = []
        for _ in range(c):
            open_ = [b for b in bands if has(b)]
            if not open_:
                break
            top = bands.index(open_[0])
            b = bands[top]
            if top < len(bands) - 1:
                lower = None
                if n >= SHARE_EVERY - 1:
                    later = [x for x in bands[top + 1 :] if x > s and has(x)]
                    lower = (later or [x for x in bands[top + 1 :] if has(x)] or [None])[0]
                if lower is not None:
                    b, s, n = lower, lower, 0
                else:
                    n += 1
            zi = zcand(b)
            rt = max(v[b], rlast) + 1 if b == 5 and rpos < len(line) else None
            if zi is not None and (rt is None or windows[b][zi][1] < rt):
                job_id, tag, key = windows[b][zi]
                pos[b] = zi + 1
                v[b] = max(v[b], tag)
                if key and cap:
                    count[key] = count.get(key, 0) + 1
                picks.append((job_id, False, b, tag, key, n, s))
            else:
                rlast = rt
                v[b] = max(v[b], rt)
                picks.append((line[rpos], True, b, rt, "", n, s))
                rpos += 1
        return picks

    def take(self, kept: list[Pick]) -> None:
        """What the leased picks change."""
        for job_id, from_ready, b, tag, key, _, _ in kept:
            if from_ready:
                self.rlast = tag
            else:
                del self.wz[job_id]
                if self.last.get((b, key)) == tag:  # its key's last waiting job
                    del self.last[(b, key)]
            self.v[b] = max(self.v[b], tag)
        if kept:
            self.n, self.s = kept[-1][5], kept[-1][6]


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
                settings=QueueSettings(
                    lease_seconds=LONG, job_retention_seconds=LONG, max_throttles=THROTTLES
                ),
            )
            self.jobs: dict[str, Job] = {}
            self.keyed: dict[str, str] = {}  # idempotency key -> first job id
            self.stale: list[Lease] = []
            self.counters = dict.fromkeys(
                ("enqueued", "succeeded", "retried", "dead", "reaped", "stale_refused",
                 "stale_extends", "released", "redriven", "purged", "replayed",
                 "rate_limited", "throttled"),
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
            self.fair = FairModel()
            self.cap: int | None = None  # the per-key cap
            self.running: set[tuple[str, str]] = set()  # (key, job id) slots held

        def teardown(self) -> None:
            keys = list(client.scan_iter(match=f"{self.queue.keys.base}:*"))
            if keys:
                client.unlink(*keys)

        # ------------------------------------------------------------- helpers
        def in_state(self, state: str) -> list[str]:
            return sorted(i for i, j in self.jobs.items() if j.state == state)

        def leave_active(self, job_id: str, state: str, front: bool = False) -> None:
            job = self.jobs[job_id]
            self.stale.append(Lease(job_id, job.token))
            job.state, job.token, job.expired = state, None, False
            self.running.discard((job.key or "", job_id))
            if state == "ready":
                self.to_waiting(job_id, front)

        def to_waiting(self, job_id: str, front: bool) -> None:
            """Back to wait: a job with a flow value into the zset (the ready list is
            read back from Redis, see fetch)."""
            job = self.jobs[job_id]
            if job.flowing:
                self.fair.put(job_id, job.priority, job.key or "", front or job.front)
            job.front = False

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
                        self.leave_active(job_id, "ready", front=True)
                    job.throttles = 0  # its failure info says lease_expired now

        def expected_fetch(self, line: list[str], count: int, alone: bool) -> dict:
            """What one fetch of ``count`` leases from ``line`` (the ready list, head
            first) and the waiting zset, and what it says; the model takes the leases.

            The fetch is ``ceil(count / SCRIPT_BATCH)`` script calls; the others are sent
            only if the first came back full. Each call: nothing when paused, nothing
            past the rate limit; else its picks (the zset's order while it has members,
            else the ready list's head) end before the first suspect, or (``alone``, the
            first call only) lease a suspect at the head alone. A call whose first pick
            is a suspect it may not lease says so; one whose zset jobs all belong to
            capped keys says capped.
            """
            said = {"jobs": [], "paused": False, "limited": False, "capped": False}
            said["suspect"] = False
            sizes = [min(SCRIPT_BATCH, count - i) for i in range(0, count, SCRIPT_BATCH)]
            for part, n in enumerate(sizes):
                tail = line[:n]
                flow = bool(self.fair.wz)  # the zset's order while it has members
                work = bool(tail) or flow
                allowed = n if self.limit is None else min(self.limit[0] - self.limit[1], n)
                if work and self.paused:
                    said["paused"] = True
                    break
                if work and allowed == 0:
                    said["limited"] = True
                    self.counters["rate_limited"] += 1
                    break
                if flow:
                    held: dict[str, int] = {}
                    for key, _ in self.running:
                        held[key] = held.get(key, 0) + 1
                    picks = self.fair.select(
                        tail, allowed, lambda i: self.jobs[i].key or "", self.cap, held
                    )
                    said["capped"] = not picks
                else:
                    picks = [(i, True, 5, 0, "", 0, 0) for i in tail[:allowed]]
                kept = []
                for i, p in enumerate(picks):
                    if self.jobs[p[0]].suspect:
                        if i == 0 and part == 0 and alone:
                            kept.append(p)
                        elif i == 0:
                            said["suspect"] = True
                        break
                    kept.append(p)
                if flow:
                    self.fair.take(kept)
                for job_id, from_ready, _, _, key, _, _ in kept:
                    if from_ready:
                        line.remove(job_id)
                    if key and self.cap:
                        self.running.add((key, job_id))
                said["jobs"] += [p[0] for p in kept]
                if self.limit is not None:
                    self.limit[1] += len(kept)
                if part == 0 and len(kept) < n:
                    break
            said["suspect"] = said["suspect"] and not said["jobs"]  # (merged: a later call's)
            return said

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
            said = self.expected_fetch(line, count, alone)
            assert [raw.job_id for raw in result.jobs] == said["jobs"]
            assert result.suspect_waiting == said["suspect"]
            assert result.paused == said["paused"]
            assert result.rate_limited == said["limited"]
            assert result.capped == (said["capped"] and not result.jobs)
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
            self.jobs[job_id].throttles = 0  # its failure info is the nack's
            self.leave_active(job_id, "delayed" if delayed else "ready")
            self.counters["retried"] += 1

        @precondition(lambda self: self.in_state("active"))
        @rule(data=st.data())
        def dead(self, data):
            job_id = self.pick(data, "active")
            assert self.queue.dead(Lease(job_id, self.jobs[job_id].token), "error") is True
            self.jobs[job_id].suspect = False
            self.jobs[job_id].throttles = 0
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
            if timed_out:
                self.jobs[job_id].throttles = 0
            self.leave_active(job_id, "ready", front=True)  # to the head of the line
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
            self.to_waiting(job_id, front=False)
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
            job.state, job.attempts, job.suspect, job.throttles = "ready", 0, False, 0
            self.to_waiting(job_id, front=False)
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
                + (self.fair, self.cap, self.running)
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
            (self.jobs, self.keyed, self.stale, self.counters, self.paused, self.limit) = model[:6]
            self.fair, self.cap, self.running = model[6:]
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

        @rule(
            n=st.integers(1, 3),
            delayed=st.booleans(),
            priority=st.sampled_from([0, 3, 5, 9]),
            key=st.sampled_from([None, "a", "b", "c"]),
        )
        def enqueue_flow(self, n, delayed, priority, key):
            requests = [
                EnqueueRequest(
                    "t", {}, delay=LONG if delayed else 0, priority=priority, fairness_key=key
                )
                for _ in range(n)
            ]
            for job_id in self.queue.enqueue_many(requests):
                state = "delayed" if delayed else "ready"
                self.jobs[job_id] = Job(state, 0, 5, priority=priority, key=key)
                if not delayed:
                    self.to_waiting(job_id, front=False)
            self.counters["enqueued"] += n

        @rule(cap=st.integers(1, 2))
        def set_key_cap(self, cap):
            assert self.queue.set_key_cap(cap) is (self.cap is not None)
            self.cap = cap

        @rule()
        def clear_key_cap(self):
            assert self.queue.clear_key_cap() is (self.cap is not None)
            self.cap = None

        @precondition(lambda self: self.in_state("active"))
        @rule(data=st.data(), later=st.booleans(), dead_past=st.booleans())
        def throttle(self, data, later, dead_past):
            job_id = self.pick(data, "active")
            job = self.jobs[job_id]
            lease = Lease(job_id, job.token)
            said = self.queue.throttle(
                lease, LONG if later else 0, fallback_delay=None if dead_past else 0
            )
            job.suspect = False  # its failure info says throttled (or the failure's)
            if job.throttles < THROTTLES:  # free: uncharged, first in its band
                assert said == "throttled"
                job.attempts -= 1
                job.throttles += 1
                self.counters["throttled"] += 1
                if later:
                    self.leave_active(job_id, "delayed")
                    job.front = True
                else:
                    self.leave_active(job_id, "ready", front=True)
            else:  # past the budget: an ordinary failure, and the count starts again
                job.throttles = 0
                if dead_past:
                    assert said == "dead"
                    self.leave_active(job_id, "dead")
                    self.counters["dead"] += 1
                else:
                    assert said == "retried"
                    self.leave_active(job_id, "ready")
                    self.counters["retried"] += 1

        @rule()
        def script_flush(self):
            client.script_flush()  # as after a restart or failover: scripts reload

        @rule(
            where=st.sampled_from(
                ["idempotency", "done", "delayed", "stats", "dead", "paused", "limit"]
                + ["keycap", "waiting"]
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
            if where == "keycap":  # a string itself: plant a list
                client.rpush(key, "planted")
            else:
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
                    elif where == "keycap":
                        self.queue.set_key_cap(1)
                    elif where == "waiting":
                        self.queue.enqueue("t", {}, priority=1)
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
            pipe.zrange(k.key("waiting"), 0, -1)
            ready, delayed, active, dead, done, attempts, waiting = pipe.execute()
            places = {"ready": ready + waiting, "delayed": delayed, "active": active}
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
        def the_fair_queueing_state_is_the_models(self):
            k = self.queue.keys
            pipe = client.pipeline(transaction=True)
            pipe.zrange(k.key("waiting"), 0, -1, withscores=True)
            pipe.hgetall(k.key("flow"))
            pipe.hgetall(k.key("tags"))
            pipe.zrange(k.key("running"), 0, -1)
            pipe.zrange(k.key("active"), 0, -1)
            scores, flows, tags, running, active = pipe.execute()
            fair = self.fair
            assert {m.decode(): int(sc) for m, sc in scores} == {
                i: b * BAND + t for i, (b, t) in fair.wz.items()
            }
            wanted = {i: j.flow_value() for i, j in self.jobs.items()}
            assert {i.decode(): v.decode() for i, v in flows.items()} == {
                i: v for i, v in wanted.items() if v is not None
            }
            tags = {f.decode(): int(v) for f, v in tags.items()}
            assert [tags.pop(f"v{b}", 0) for b in range(10)] == fair.v
            assert (tags.pop("r", 0), tags.pop("n", 0), tags.pop("s", -1)) == (
                fair.rlast,
                fair.n,
                fair.s,
            )
            assert tags == {f"{b}{key}": t for (b, key), t in fair.last.items()}
            slots = {tuple(m.decode().split("\0")) for m in running}
            assert slots == self.running
            assert {i for _, i in slots} <= {a.decode() for a in active}  # running ⊆ active

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
