"""The worker processes of a chaos run: started per step, killed, and replaced.

A :class:`WorkerPool` keeps ``per_step`` processes serving each step. The chaos
driver sends real signals to them (SIGKILL, SIGTERM, SIGSTOP and SIGCONT);
:meth:`WorkerPool.poll` notices every exit, classifies it (killed by us, stopped
gracefully by our SIGTERM, died on its own) and starts a replacement, as a
supervisor would, and thaws every frozen process when its freeze is over, also
one that stopped itself inside a transaction (an injected fault).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

StartWorker = Callable[[Sequence[str]], "subprocess.Popen[bytes]"]
"""Starts one worker process serving the given steps."""


@dataclass
class WorkerProc:
    """One worker process of the pool.

    Attributes:
        steps: the steps it serves.
        proc: the process.
        signalled: ``"SIGKILL"`` / ``"SIGTERM"`` once the driver signalled it.
        term_deadline: monotonic time after which a SIGTERMed process is SIGKILLed.
        frozen_until: monotonic time the frozen (SIGSTOPped) process gets SIGCONT.
    """

    steps: tuple[str, ...]
    proc: subprocess.Popen[bytes]
    signalled: str | None = None
    term_deadline: float | None = None
    frozen_until: float | None = None

    @property
    def pid(self) -> int:
        """The process id."""
        return self.proc.pid


@dataclass
class PoolCounts:
    """What happened to the pool's processes.

    Attributes:
        counts: ``sigkill_sent``, ``sigterm_sent``, ``sigterm_mid_job`` (the process
            held a lease when signalled), ``graceful_exits`` (exit 0 after our
            SIGTERM), ``sigterm_overran`` (still alive after the grace period: then
            SIGKILLed), ``died_unprompted`` (exited with no signal from us, e.g. an
            injected crash), ``started`` (replacements included), ``frozen``
            (SIGSTOPs sent), ``froze_itself`` (processes found stopped that we had
            not frozen: the injected freeze inside a transaction), ``thawed``
            (SIGCONTs sent when a freeze was over).
    """

    counts: Counter[str] = field(default_factory=Counter)

    def __getitem__(self, name: str) -> int:
        return self.counts[name]


class WorkerPool:
    """Keeps ``per_step`` worker processes per step alive; signals them on request.

    Args:
        steps: the steps to serve (one process serves one step).
        per_step: processes per step (and per group of ``groups``).
        start: starts one worker process for the given steps.
        groups: more processes, each serving several steps (for example the
            compensating steps, which are rare), ``per_step`` of each.
        rng: chooses the victims (inject a seeded one for repeatable runs).
        term_grace: seconds a SIGTERMed process gets before it is SIGKILLed
            (the worker's own grace period plus a margin).
        freeze_seconds: how long a frozen process stays stopped, seconds (one we
            froze, and one found stopped by itself).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        steps: Sequence[str],
        per_step: int,
        start: StartWorker,
        *,
        groups: Sequence[tuple[str, ...]] = (),
        rng: random.Random | None = None,
        term_grace: float = 15.0,
        freeze_seconds: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if per_step < 1:
            raise ValueError("per_step must be >= 1")
        self.steps = tuple(steps)
        self.groups: tuple[tuple[str, ...], ...] = (*((s,) for s in steps), *groups)
        self.served: tuple[str, ...] = tuple(s for g in self.groups for s in g)
        self.per_step = per_step
        self.start = start
        self.rng = rng or random.Random()
        self.term_grace = term_grace
        self.freeze_seconds = freeze_seconds
        self.clock = clock
        self.procs: list[WorkerProc] = []
        self.stats = PoolCounts()

    def start_all(self) -> None:
        """Start ``per_step`` processes for every step and every group."""
        for group in self.groups:
            for _ in range(self.per_step):
                self._spawn(group)

    def _spawn(self, steps: tuple[str, ...]) -> WorkerProc:
        worker = WorkerProc(steps, self.start(steps))
        self.procs.append(worker)
        self.stats.counts["started"] += 1
        return worker

    def live(self) -> list[WorkerProc]:
        """Processes still running and not yet signalled by us."""
        return [w for w in self.procs if w.signalled is None and w.proc.poll() is None]

    def pids(self) -> set[int]:
        """Pids of every process of the pool that is still running."""
        return {w.pid for w in self.procs if w.proc.poll() is None}

    def sigkill_random(self) -> WorkerProc | None:
        """SIGKILL one live process chosen at random; None when none is live."""
        victims = self.live()
        if not victims:
            return None
        victim = self.rng.choice(victims)
        self._signal(victim, signal.SIGKILL)
        victim.signalled = "SIGKILL"
        self.stats.counts["sigkill_sent"] += 1
        return victim

    def freeze_random(self) -> WorkerProc | None:
        """SIGSTOP one live process that is not frozen, chosen at random, for
        ``freeze_seconds`` (:meth:`poll` thaws it); None when none is left."""
        victims = [w for w in self.live() if w.frozen_until is None]
        if not victims:
            return None
        victim = self.rng.choice(victims)
        self._signal(victim, signal.SIGSTOP)
        victim.frozen_until = self.clock() + self.freeze_seconds
        self.stats.counts["frozen"] += 1
        return victim

    def _tend_freezes(self, worker: WorkerProc, now: float) -> None:
        """Thaw a process whose freeze is over; time one found stopped by itself."""
        if worker.frozen_until is None:
            if process_stopped(worker.pid):
                worker.frozen_until = now + self.freeze_seconds
                self.stats.counts["froze_itself"] += 1
        elif now >= worker.frozen_until:
            self._signal(worker, signal.SIGCONT)
            worker.frozen_until = None
            self.stats.counts["thawed"] += 1

    def sigterm_busy(self, busy_pids: Iterable[int]) -> WorkerProc | None:
        """SIGTERM one live process, preferring one that holds a lease (mid-job).

        Args:
            busy_pids: pids that hold at least one lease right now.

        Returns:
            The process signalled, or None when none is live.
        """
        live = self.live()
        if not live:
            return None
        busy = set(busy_pids)
        holding = [w for w in live if w.pid in busy]
        victim = self.rng.choice(holding or live)
        self._signal(victim, signal.SIGTERM)
        victim.signalled = "SIGTERM"
        victim.term_deadline = self.clock() + self.term_grace
        self.stats.counts["sigterm_sent"] += 1
        if holding:
            self.stats.counts["sigterm_mid_job"] += 1
        return victim

    def poll(self, *, replace: bool = True) -> list[WorkerProc]:
        """Collect exited processes, classify them, and start replacements.

        A SIGTERMed process still alive after ``term_grace`` is SIGKILLed
        (counted as ``sigterm_overran``).

        Args:
            replace: start a replacement for each exited process.

        Returns:
            The processes that exited since the last call.
        """
        gone: list[WorkerProc] = []
        now = self.clock()
        for worker in list(self.procs):
            code = worker.proc.poll()
            if code is None:
                self._tend_freezes(worker, now)
                if worker.term_deadline is not None and now > worker.term_deadline:
                    self._signal(worker, signal.SIGKILL)
                    worker.term_deadline = None
                    self.stats.counts["sigterm_overran"] += 1
                continue
            self.procs.remove(worker)
            gone.append(worker)
            if worker.signalled == "SIGTERM" and code == 0:
                self.stats.counts["graceful_exits"] += 1
            elif worker.signalled is None:
                self.stats.counts["died_unprompted"] += 1
            if replace:
                self._spawn(worker.steps)
        return gone

    def stop(self, timeout: float = 20.0) -> None:
        """Thaw and SIGTERM every process, wait up to ``timeout`` s, SIGKILL the rest."""
        for worker in self.procs:
            if worker.proc.poll() is None:
                self._signal(worker, signal.SIGCONT)
                self._signal(worker, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for worker in self.procs:
            try:
                worker.proc.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                self._signal(worker, signal.SIGKILL)
                worker.proc.wait(5)
        self.procs.clear()

    @staticmethod
    def _signal(worker: WorkerProc, signum: int) -> None:
        try:
            os.kill(worker.pid, signum)
        except ProcessLookupError:
            pass


def lease_holder_pid(token: str) -> int | None:
    """The pid inside a lease token ``<seq>:<host>:<pid>:<hex>`` (None if it has none)."""
    parts = token.split(":")
    if len(parts) >= 4 and parts[-2].isdigit():
        return int(parts[-2])
    return None


def process_stopped(pid: int) -> bool:
    """True when process ``pid`` is stopped by a signal (state ``T`` in ``/proc``);
    False when it runs, is gone, or ``/proc`` cannot tell."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    # the state follows the command name, which is in parentheses and may hold spaces
    fields = stat[stat.rfind(b")") + 2 :].split(b" ", 1)
    return bool(fields) and fields[0] in (b"T", b"t")
