"""The lane's side of an isolated child: start it, run one call, enforce the time limit."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

from ..attempts import TIMED_OUT, Guard, GuardPolicy
from ..errors import AttemptLost, IsolatedChildError, TimeLimitExceeded
from ..job import JobContext
from .wire import MAX_FROM_CHILD, Channel, context_data, error_from, payload_data

log = logging.getLogger("reliable_queue.isolation")

#: longest wait for a child to build its registry and say ready, seconds
START_TIMEOUT_SECONDS = 60.0
#: how long a child asked to stop may take before it is killed, seconds
STOP_WAIT_SECONDS = 2.0
#: how long a child that closed its socket may take to exit before it is killed, seconds
EXIT_WAIT_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class Finished:
    """The child ran the call: per job None or the error it failed with."""

    errors: list[BaseException | None]


@dataclass(frozen=True, slots=True)
class Killed:
    """The lane killed the child at the run's time limit.

    Attributes:
        kept: every delivery of the call had completed a guarded block before the kill
            (its effect is in): the call ran on past its limit after its commit, and was
            killed one hold bound (a lease) past the limit.
    """

    kept: bool


@dataclass(frozen=True, slots=True)
class Lost:
    """The child died during the call (a signal, an exit, a protocol error)."""

    error: IsolatedChildError


CallResult = Finished | Killed | Lost


class _HoldFailed(Exception):
    """How a guard is left when the child's guarded block raised, or never ended."""


class ChildProcess:
    """One lane's persistent isolated child, started with its own interpreter.

    Not thread-safe: the lane's thread alone calls it (it enters the deliveries'
    guards for the child, so "held", "timed out" and "committed" are decided in one
    thread). Started by :meth:`spawn` (at once) and awaited by :meth:`ready`, so a
    child restarted after a kill boots while the lane settles and fetches.

    Args:
        factory: ``"package.module:function"``, the child's registry factory.
        policy: the worker's guard policy: its clock (monotonic seconds, the one the
            run's deadline is on) and ``hold_limit`` (seconds a hold defers the kill).
        label: names the child in logs (e.g. the lane's queue).
        start_timeout: longest wait for ``ready``, seconds.
    """

    def __init__(
        self,
        factory: str,
        policy: GuardPolicy,
        *,
        label: str = "",
        start_timeout: float = START_TIMEOUT_SECONDS,
    ) -> None:
        self.factory = factory
        self.policy = policy
        self.label = label
        self.start_timeout = start_timeout
        self._proc: subprocess.Popen[bytes] | None = None
        self._channel: Channel | None = None
        self._ready = False
        self._started_at = 0.0

    @property
    def pid(self) -> int | None:
        """The running child's pid, or None."""
        return None if self._proc is None else self._proc.pid

    def spawn(self) -> None:
        """Start a child unless one runs; returns at once (:meth:`ready` waits for it).

        Raises:
            IsolatedChildError: the interpreter cannot be started.
        """
        if self._proc is not None:
            return
        mine, theirs = socket.socketpair()
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-P",  # never import from the working directory before sys.path is set
                    "-m",
                    "reliable_queue.isolation.child",
                    str(theirs.fileno()),
                    str(os.getpid()),
                ],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        except OSError as exc:
            mine.close()
            raise IsolatedChildError(f"cannot start an isolated child: {exc}") from exc
        finally:
            theirs.close()
        self._proc, self._channel, self._ready = proc, Channel(mine, MAX_FROM_CHILD), False
        self._started_at = self.policy.clock()
        start = {
            "op": "start",
            "factory": self.factory,
            "sys_path": list(sys.path),
            "log_level": logging.getLogger().getEffectiveLevel(),
        }
        try:
            self._channel.send(start)
        except OSError:
            pass  # it died at once: ready() says how

    def ready(self) -> None:
        """Start a child if needed and wait until it built its registry.

        Raises:
            IsolatedChildError: it could not start, its factory failed (the message
                has the factory's error), or it was not ready within ``start_timeout``;
                the child is gone then, and the next call starts another.
        """
        self.spawn()
        if self._ready:
            return
        assert self._channel is not None
        clock = self.policy.clock
        deadline = self._started_at + self.start_timeout
        try:
            while True:
                left = deadline - clock()
                if left <= 0 or not self._channel.poll(left):
                    raise IsolatedChildError(
                        f"isolated child of {self.label or 'a lane'} was not ready within "
                        f"{self.start_timeout:g} s"
                    )
                message = self._channel.recv()
                if message.get("op") == "ready":
                    self._ready = True
                    log.info(
                        "isolated child %s of %s ready in %.2f s",
                        self.pid,
                        self.label or "a lane",
                        clock() - self._started_at,
                    )
                    return
                if message.get("op") == "failed":
                    raise IsolatedChildError(
                        f"isolated child could not build its registry with {self.factory}: "
                        f"{str(message.get('error'))[:2000]}"
                    )
                raise IsolatedChildError(f"isolated child sent {message.get('op')!r} at start")
        except (EOFError, OSError, ValueError):
            code = self._end()
            raise IsolatedChildError(
                f"isolated child of {self.label or 'a lane'} {describe_exit(code)} at start",
                code,
            ) from None
        except IsolatedChildError:
            self._end()
            raise

    def call(
        self, task: str, pairs: list[tuple[Any, JobContext]], deadline: float | None
    ) -> CallResult:
        """Run one handler call of ``task`` on ``pairs`` in the child (after :meth:`ready`).

        While it waits, the lane answers the child's holds from each delivery's guard.
        At ``deadline`` (the policy's clock; None: no limit) it revokes the guards as
        the time-limit check does (``AttemptGuard.revoke``) and kills the child if any
        was revoked; a hold in progress defers that up to the policy's ``hold_limit``
        from its start, then loses the guards and kills. A call whose every guard had
        completed its block is not timed out; past ``deadline + hold_limit`` it is
        killed as :class:`Killed` ``(kept=True)``. No hold is granted past the deadline
        unless the time-out was decided against.

        Args:
            task: the task name (the child's registry has it).
            pairs: ``[(validated payload, context), ...]``: one job, or a batch.
            deadline: monotonic seconds the call must end by, or None.

        Returns:
            :class:`Finished`, :class:`Killed` or :class:`Lost`. After Killed or Lost
            no child runs; :meth:`spawn` starts the next.
        """
        assert self._channel is not None and self._ready, "call() before ready()"
        guards: list[Guard] = [ctx.guard for _, ctx in pairs]
        depth = [0] * len(guards)
        message = {
            "op": "run",
            "task": task,
            "items": [{"payload": payload_data(p), "ctx": context_data(c)} for p, c in pairs],
        }
        try:
            self._channel.send(message)
        except OSError:
            return self._lost(task, guards, depth)
        return self._await(task, guards, depth, deadline)

    def _await(
        self, task: str, guards: list[Guard], depth: list[int], deadline: float | None
    ) -> CallResult:
        assert self._channel is not None
        clock, hold_limit = self.policy.clock, self.policy.hold_limit
        held_since: float | None = None  # start of the hold in progress (any delivery)
        kept_until: float | None = None  # every guard kept at the deadline: runs on until
        while True:
            if deadline is None:
                wake = None
            elif held_since is not None:
                wake = max(deadline, held_since + hold_limit)
            else:
                wake = kept_until if kept_until is not None else deadline
            timeout = None if wake is None else max(wake - clock(), 0.0)
            message = None
            if self._channel.poll(timeout):
                try:
                    message = self._channel.recv()
                except (EOFError, OSError, ValueError):
                    return self._lost(task, guards, depth)
            now = clock()
            if (
                deadline is not None
                and held_since is None
                and kept_until is None
                and now >= deadline
                and (message is None or message.get("op") == "hold")
            ):  # the limit passed with no hold in progress: decide before any new hold
                # every guard is revoked (a list, not a generator): each decides alone
                if any([g.revoke(TIMED_OUT, now) for g in guards]):
                    return self._kill(guards, depth)
                kept_until = deadline + hold_limit
            if message is None:
                if held_since is not None:  # a hold past its bound: the time-out wins
                    for guard in guards:
                        guard.lose(TIMED_OUT)
                    return self._kill(guards, depth)
                if kept_until is not None and now >= kept_until:
                    return self._kill(guards, depth)
                continue
            op, i = message.get("op"), message.get("i")
            if op == "done":
                return self._finished(task, guards, depth, message.get("results"))
            if op not in ("hold", "unhold") or not (isinstance(i, int) and 0 <= i < len(guards)):
                log.error("isolated child %s sent %r; killing it", self.pid, op)
                return self._lost(task, guards, depth, protocol=True)
            if op == "hold":
                try:
                    guards[i].__enter__()
                except AttemptLost as exc:
                    self._reply({"op": "refused", "reason": exc.reason})
                    continue
                depth[i] += 1
                if held_since is None:
                    held_since = now
                self._reply({"op": "held"})
            elif depth[i] > 0:
                depth[i] -= 1
                if message.get("ok") is True:
                    guards[i].__exit__(None, None, None)
                else:
                    guards[i].__exit__(_HoldFailed, _HoldFailed(), None)
                if not any(depth):
                    held_since = None

    def _reply(self, message: dict[str, Any]) -> None:
        assert self._channel is not None
        try:
            self._channel.send(message)
        except OSError:
            pass  # the child died: the next read says so

    def _finished(
        self, task: str, guards: list[Guard], depth: list[int], results: Any
    ) -> CallResult:
        _unwind(guards, depth)  # a hold the handler never ended counts as failed
        if not isinstance(results, list) or len(results) != len(guards):
            log.error("isolated child %s sent unreadable results; killing it", self.pid)
            return self._lost(task, guards, depth, protocol=True)
        return Finished([None if r is None else error_from(r) for r in results])

    def _kill(self, guards: list[Guard], depth: list[int]) -> Killed:
        # kept: every delivery's guarded block completed before the kill (its effect is in)
        kept = all(guard.kept for guard in guards)
        log.warning(
            "isolated child %s of %s killed at its run's time limit%s",
            self.pid,
            self.label or "a lane",
            " (its guarded blocks had completed)" if kept else "",
        )
        self._discard()
        _unwind(guards, depth)
        return Killed(kept)

    def _lost(
        self, task: str, guards: list[Guard], depth: list[int], *, protocol: bool = False
    ) -> Lost:
        pid = self.pid
        if protocol:
            self._discard()
            code = None
        else:
            code = self._end()
        _unwind(guards, depth)
        how = "broke its protocol and was killed" if protocol else describe_exit(code)
        return Lost(
            IsolatedChildError(
                f"the isolated child process (pid {pid}) running task {task!r} {how}",
                code,
            )
        )

    def _end(self) -> int | None:
        """Wait for a child whose socket ended (killing it after a bound); its status."""
        proc = self._proc
        if proc is None:
            return None
        try:
            code = proc.wait(EXIT_WAIT_SECONDS)
        except subprocess.TimeoutExpired:
            self._discard()
            return proc.returncode
        self._discard()
        return code

    def _discard(self) -> None:
        """Kill the child (if it runs), reap it, close the socket."""
        proc, channel = self._proc, self._channel
        self._proc, self._channel, self._ready = None, None, False
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        if channel is not None:
            channel.close()

    def close(self) -> None:
        """Ask the child to stop, then kill it if it has not within a bound."""
        proc, channel = self._proc, self._channel
        if proc is None or channel is None:
            return
        try:
            channel.send({"op": "stop"})
            proc.wait(STOP_WAIT_SECONDS)
        except (OSError, subprocess.TimeoutExpired):
            pass
        self._discard()


def _unwind(guards: list[Guard], depth: list[int]) -> None:
    """Leave every hold still open as failed (the child ended, or was killed, inside it)."""
    for i, guard in enumerate(guards):
        while depth[i] > 0:
            depth[i] -= 1
            guard.__exit__(TimeLimitExceeded, TimeLimitExceeded(), None)


def describe_exit(code: int | None) -> str:
    """``died of signal SIGSEGV (11)``, ``exited with status 3``, or ``ended`` (unknown)."""
    if code is None:
        return "ended"
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = "an unknown signal"
        return f"died of signal {name} ({-code})"
    return f"exited with status {code}"
