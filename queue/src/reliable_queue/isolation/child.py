"""The isolated child: ``python -P -m reliable_queue.isolation.child <fd> <worker pid>``.

Started by its lane (:class:`~reliable_queue.isolation.ChildProcess`), never by hand.
It dies with the lane's thread (Linux ``PR_SET_PDEATHSIG``) and ignores SIGINT and
SIGTERM (the worker shuts down; a Ctrl-C reaches the whole process group). It builds
its registry with the worker's factory, says ``ready``, then runs one handler call per
``run`` message until ``stop`` or the end of its socket.
"""

from __future__ import annotations

import ctypes
import faulthandler
import logging
import os
import signal
import socket
import sys
import threading
import traceback
from types import TracebackType
from typing import Any

from ..attempts import ABANDONED
from ..errors import AttemptLost, PermanentError, UnknownTaskError
from ..registry import TaskDefinition, TaskRegistry
from .factory import load_factory
from .wire import Channel, context_from, error_data

log = logging.getLogger("reliable_queue.isolation")

_PR_SET_PDEATHSIG = 1


class RemoteGuard:
    """A delivery's attempt guard in the child: each hold asks the lane.

    The lane enters the delivery's real guard (``reliable_queue.attempts``) and
    answers ``held``, or ``refused`` with the reason it would raise in-process, which
    is raised here as :class:`~reliable_queue.AttemptLost`. The lane does not kill the
    child while a hold is in progress (bounded by one lease). One local re-entrant
    lock per delivery, as in-process: a second thread waits for the first's block.

    Args:
        channel: the child's channel to its lane.
        index: the delivery's position in the current call.
    """

    __slots__ = ("_channel", "_index", "_kept", "_lock", "_lost")

    def __init__(self, channel: Channel, index: int) -> None:
        self._channel = channel
        self._index = index
        self._lock = threading.RLock()
        self._lost: str | None = None
        self._kept = False

    @property
    def lost(self) -> str | None:
        """The reason a hold was refused, or None."""
        return self._lost

    @property
    def kept(self) -> bool:
        """True once a guarded block completed without an error."""
        return self._kept

    def __enter__(self) -> RemoteGuard:
        self._lock.acquire()
        try:
            reply = self._channel.request({"op": "hold", "i": self._index})
        except (OSError, EOFError, ValueError):  # the lane is gone: nothing may commit
            reply = {"op": "refused", "reason": ABANDONED}
        if reply.get("op") == "held":
            return self
        self._lock.release()
        reason = reply.get("reason")
        self._lost = reason if isinstance(reason, str) else ABANDONED
        raise AttemptLost(self._lost)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            self._channel.send({"op": "unhold", "i": self._index, "ok": exc_type is None})
        except OSError:
            pass  # the lane is gone; its guard was unwound when it saw the end
        finally:
            if exc_type is None:
                self._kept = True
            self._lock.release()


def run_call(channel: Channel, registry: TaskRegistry, message: dict[str, Any]) -> list[Any]:
    """Run one ``run`` message's handler call; return per job None or its error data.

    A task this registry lacks, or a payload its model refuses, fails each of those jobs
    permanently; an exception of the batch handler as a whole fails every job of it.
    """
    jobs = message.get("items") or []
    try:
        definition = registry.get(str(message.get("task")))
    except UnknownTaskError as exc:
        return [error_data(_permanent(exc), "")] * len(jobs)
    results: list[Any] = [None] * len(jobs)
    pairs: list[tuple[int, Any, Any]] = []
    for n, job in enumerate(jobs):
        try:
            payload = definition.validate(job["payload"])
            ctx = context_from(job["ctx"], RemoteGuard(channel, n))
        except Exception as exc:  # a payload or context the child cannot take
            results[n] = error_data(_permanent(exc), traceback.format_exc())
            continue
        pairs.append((n, payload, ctx))
    if definition.batch:
        _run_batch(definition, pairs, results)
    else:
        for n, payload, ctx in pairs:
            try:
                definition.handler(payload, ctx)  # type: ignore[call-arg]
            except Exception as exc:
                results[n] = error_data(exc, traceback.format_exc())
    return results


def _run_batch(
    definition: TaskDefinition, pairs: list[tuple[int, Any, Any]], results: list[Any]
) -> None:
    if not pairs:
        return
    try:
        errors = list(definition.handler([(p, c) for _, p, c in pairs]))  # type: ignore[call-arg,arg-type]
        if len(errors) != len(pairs):
            raise RuntimeError(
                f"batch handler returned {len(errors)} results for {len(pairs)} jobs"
            )
    except Exception as exc:
        data = error_data(exc, traceback.format_exc())
        for n, _, _ in pairs:
            results[n] = data
        return
    for (n, _, _), error in zip(pairs, errors, strict=True):
        if error is not None:
            trace = "".join(traceback.format_exception(error)) if error.__traceback__ else ""
            results[n] = error_data(error, trace)


def _permanent(exc: Exception) -> Exception:
    permanent = PermanentError(f"{type(exc).__name__}: {exc}")
    permanent.__cause__ = exc
    return permanent


def serve(channel: Channel, registry: TaskRegistry) -> int:
    """Answer ``run`` messages until ``stop`` or the end of the socket; the exit status."""
    while True:
        try:
            message = channel.recv()
        except EOFError:
            return 0
        op = message.get("op")
        if op == "stop":
            return 0
        if op != "run":
            log.error("isolated child: unexpected message %r; exiting", op)
            return 2
        channel.send({"op": "done", "results": run_call(channel, registry, message)})


def _die_with(worker_pid: int) -> None:
    """SIGKILL this process when the thread that started it ends (Linux), and exit
    now if the worker is already gone."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the end of the socket still stops it
        pass
    if os.getppid() != worker_pid:
        os._exit(0)


def main(argv: list[str]) -> int:
    """Entry point; ``argv``: the socket's fd and the worker's pid. Returns the exit status."""
    fd, worker_pid = int(argv[1]), int(argv[2])
    _die_with(worker_pid)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    faulthandler.enable()  # a native crash prints its Python stack to the worker's stderr
    channel = Channel(socket.socket(fileno=fd))
    start = channel.recv()
    parent_path = [p for p in start.get("sys_path", []) if isinstance(p, str)]
    sys.path[:] = parent_path + [p for p in sys.path if p not in parent_path]
    logging.basicConfig(
        level=int(start.get("log_level") or logging.WARNING),
        format="%(asctime)s isolated[%(process)d] %(name)s %(levelname)s %(message)s",
    )
    try:
        registry = load_factory(str(start.get("factory")))()
        if not isinstance(registry, TaskRegistry):
            raise TypeError(f"the factory returned {type(registry).__name__}, not a TaskRegistry")
    except Exception as exc:
        channel.send({"op": "failed", "error": f"{type(exc).__name__}: {exc}"[:2000]})
        return 1
    channel.send({"op": "ready", "pid": os.getpid()})
    return serve(channel, registry)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
