"""What crosses between a lane and its isolated child: JSON frames on one socket.

Messages are dicts with an ``op``. Lane to child: ``start`` (factory name, sys.path,
log level), ``run`` (task name; per job its JSON payload and context fields), the
replies ``held`` / ``refused`` (reason) to a hold, ``stop``. Child to lane: ``ready``
(pid) or ``failed`` (error), ``hold`` / ``unhold`` (job position, whether the block
completed), ``done`` (per job None or an error's data, :func:`error_data`). No pickle:
nothing the child sends can run code in the worker.
"""

from __future__ import annotations

import socket
import threading
from multiprocessing.connection import Connection
from typing import Any

import orjson
from pydantic import BaseModel

from ..attempts import REASONS, Guard
from ..errors import (
    AttemptLost,
    IsolatedError,
    IsolatedPermanentError,
    PermanentError,
    QueueLimitError,
    Throttled,
)
from ..job import JobContext, make_context

#: longest frame the lane reads from its child, bytes (results: errors and tracebacks,
#: cut to the bounds below, per job of a call)
MAX_FROM_CHILD = 64 * 1024 * 1024
#: how much of an error's message / traceback text the child sends back, characters
MAX_MESSAGE_CHARS = 2000
MAX_TRACEBACK_CHARS = 16000
#: the context fields that cross, in :class:`~reliable_queue.JobContext` order (not the guard)
CONTEXT_FIELDS = (
    "job_id",
    "queue",
    "task",
    "attempt",
    "max_attempts",
    "lease_token",
    "fencing_token",
    "enqueued_at",
    "idempotency_key",
)


class Channel:
    """JSON frames over a connected stream socket (length-prefixed, as
    ``multiprocessing.connection`` frames them), safe for several sending threads.

    Args:
        sock: one end of a ``socket.socketpair()``; the channel owns it from now on.
        max_frame: longest frame :meth:`recv` accepts, bytes (None: no bound).
    """

    def __init__(self, sock: socket.socket, max_frame: int | None = None) -> None:
        self._conn = Connection(sock.detach())
        self._max = max_frame
        self._lock = threading.Lock()  # one request and its reply at a time

    def fileno(self) -> int:
        """The socket's file descriptor."""
        return self._conn.fileno()

    def send(self, message: dict[str, Any]) -> None:
        """Send one message.

        Raises:
            OSError: the other end is gone.
            TypeError: the message holds something JSON cannot represent.
        """
        data = orjson.dumps(message)
        with self._lock:
            self._conn.send_bytes(data)

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one message and wait for the reply (nothing else is sent meanwhile).

        Raises:
            OSError / EOFError: the other end is gone.
        """
        data = orjson.dumps(message)
        with self._lock:
            self._conn.send_bytes(data)
            return self._decode(self._conn.recv_bytes(self._max))

    def poll(self, timeout: float | None) -> bool:
        """True when a message (or the end of the stream) can be read within ``timeout`` s
        (None: wait for it)."""
        return self._conn.poll(timeout)

    def recv(self) -> dict[str, Any]:
        """The next message.

        Raises:
            EOFError: the other end closed (or died).
            OSError: a frame longer than ``max_frame``, or the socket failed.
            ValueError: a frame that is not a JSON object.
        """
        return self._decode(self._conn.recv_bytes(self._max))

    def close(self) -> None:
        """Close the socket (the other end then reads EOF)."""
        self._conn.close()

    @staticmethod
    def _decode(data: bytes) -> dict[str, Any]:
        message = orjson.loads(data)
        if not isinstance(message, dict):
            raise ValueError("a frame that is not a JSON object")
        return message


def payload_data(payload: Any) -> Any:
    """A validated payload as JSON data (a pydantic model dumped in JSON mode)."""
    if isinstance(payload, BaseModel):
        return payload.model_dump(mode="json")
    return payload


def context_data(ctx: JobContext) -> dict[str, Any]:
    """The fields of ``ctx`` that cross to the child (every one but the guard)."""
    return {name: getattr(ctx, name) for name in CONTEXT_FIELDS}


def context_from(data: dict[str, Any], guard: Guard) -> JobContext:
    """A :class:`~reliable_queue.JobContext` from :func:`context_data`, with ``guard``.

    Raises:
        KeyError: a field is missing.
    """
    return make_context(*(data[name] for name in CONTEXT_FIELDS), guard)


def error_data(error: BaseException, trace: str) -> dict[str, Any]:
    """What the child sends back for a job that failed with ``error``.

    Returns:
        ``{"type", "message", "traceback", "permanent", "retryable", "cause", "lost",
        "throttle"}``:
        class name, text and traceback (cut to the bounds above), whether it is a
        :class:`~reliable_queue.PermanentError`, its ``retryable`` attribute when it is a
        bool (else None), the class name of its ``__cause__`` (or None), and the reason
        of an :class:`~reliable_queue.AttemptLost` (else None), and the delay of a
        :class:`~reliable_queue.Throttled` (else None).
    """
    try:
        message = str(error)
    except Exception:  # a __str__ that fails must not lose the job's error
        message = f"<{type(error).__name__} whose text cannot be shown>"
    retryable = getattr(error, "retryable", None)
    cause = error.__cause__
    return {
        "type": type(error).__name__,
        "message": message[:MAX_MESSAGE_CHARS],
        "traceback": trace[-MAX_TRACEBACK_CHARS:],
        "permanent": isinstance(error, PermanentError),
        "retryable": retryable if isinstance(retryable, bool) else None,
        "cause": None if cause is None else type(cause).__name__,
        "lost": error.reason if isinstance(error, AttemptLost) else None,
        "throttle": error.delay_seconds if isinstance(error, Throttled) else None,
    }


def error_from(data: Any) -> BaseException:
    """The exception the lane records for an entry of a ``done`` reply.

    An attempt guard's refusal comes back as :class:`~reliable_queue.AttemptLost` (its
    reason kept, so it is retried as a lost attempt is); a permanent error as
    :class:`~reliable_queue.errors.IsolatedPermanentError`; anything else as
    :class:`~reliable_queue.errors.IsolatedError`. Fields of the wrong type are shown
    as text, never trusted.
    """
    if not isinstance(data, dict):
        return IsolatedError("IsolatedError", f"the child sent an unreadable result: {data!r:.200}")
    lost = data.get("lost")
    if lost in REASONS:
        return AttemptLost(lost)
    throttle = data.get("throttle")
    if isinstance(throttle, int | float) and not isinstance(throttle, bool):
        try:  # a throttle comes back as one, so it is put off uncharged as in a thread
            return Throttled(throttle, str(data.get("message"))[:MAX_MESSAGE_CHARS])
        except QueueLimitError:
            pass  # a delay out of bounds: an ordinary error
    retryable = data.get("retryable")
    cause = data.get("cause")
    kind = IsolatedPermanentError if data.get("permanent") is True else IsolatedError
    return kind(
        str(data.get("type"))[:200],
        str(data.get("message"))[:MAX_MESSAGE_CHARS],
        str(data.get("traceback") or "")[-MAX_TRACEBACK_CHARS:],
        retryable if isinstance(retryable, bool) else None,
        None if cause is None else str(cause)[:200],
    )
