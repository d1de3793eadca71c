"""Load the Lua scripts beside this module and run them, pipelined, by EVALSHA.

A script file may contain ``-- @include <file>.lua`` lines; each is replaced by
that fragment's text at load time, so shared code is included, not copied.
Scripts are sent by EVALSHA; a NOSCRIPT reply (Redis restarted or SCRIPT FLUSH)
loads them again and re-runs only the commands that failed, never the others.
On Redis Cluster a round trip goes to the master owning the calls' slot, and a
redirect (MOVED, a failover) re-sends only the redirected commands. With
``min_replicas`` a round trip that changes a job's durable state ends with a
``WAIT`` on the same connection.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import redis
from redis.exceptions import NoScriptError

from .cluster import (
    REDIRECT_ATTEMPTS,
    UNAVAILABLE,
    is_cluster,
    is_redirect,
    node_client,
    pause,
    refresh,
)
from .errors import (
    PartialRoundTripError,
    QueueConnectionError,
    QueueDataError,
    QueueLimitError,
    ReplicationTimeoutError,
    ScriptUnavailableError,
)

#: Scripts whose effect must survive a failover when ``min_replicas`` is set: a job
#: accepted (enqueue), finished (ack), rescheduled (nack), dead-lettered or redriven.
DURABLE_SCRIPTS = frozenset({"enqueue", "ack", "nack", "throttle", "dead", "redrive"})

#: Sends of one script call that may meet NOSCRIPT (the first is an EVALSHA, re-sends
#: carry the source) before :class:`ScriptUnavailableError`.
SCRIPT_ATTEMPTS = 3

_INCLUDE = re.compile(r"^-- @include (\S+)\s*$", re.MULTILINE)


@cache
def script_source(name: str) -> str:
    """Full text of ``lua/<name>.lua`` with its ``@include`` lines expanded.

    Raises:
        FileNotFoundError: if the file or an included fragment does not exist.
    """
    folder = resources.files(__package__).joinpath("lua")

    def expand(match: re.Match[str]) -> str:
        return folder.joinpath(match.group(1)).read_text(encoding="utf-8")

    return _INCLUDE.sub(expand, folder.joinpath(f"{name}.lua").read_text(encoding="utf-8"))


def translate(exc: redis.ResponseError) -> Exception:
    """The queue error for a script's refusal, or ``exc`` itself for anything else.

    Scripts refuse with ``QUEUE_CORRUPT ...`` (a key of the wrong type or shape) and
    ``QUEUE_LIMIT ...`` (a call beyond a limit) before their first write.
    """
    text = str(exc)
    if "QUEUE_CORRUPT" in text:
        return QueueDataError(text[text.index("QUEUE_CORRUPT") + 14 :] + " (nothing was changed)")
    if "QUEUE_LIMIT" in text:
        return QueueLimitError(text[text.index("QUEUE_LIMIT") + 12 :])
    return exc


def round_trip(client: redis.Redis, commands: Sequence[tuple[Any, ...]]) -> list[Any]:
    """Send ``commands`` in one write on one pooled connection and read every reply.

    What a non-transactional redis-py pipeline does with ``raise_on_error=False``,
    without its per-call set-up (a pipeline object, its command stack and resets),
    which cost a worker lane more than its own work at batch size 1. Replies are
    returned raw (no response callbacks: scripts and WAIT have none).

    Args:
        client: a ``redis.Redis`` (a cluster node's client included).
        commands: each a tuple ``(name, *args)``.

    Returns:
        One reply per command; a command's error reply is its ``redis.ResponseError``
        (``NoScriptError`` included), in its place.

    Raises:
        redis.ConnectionError / redis.TimeoutError: the connection failed (it is
            dropped; some commands may have run). Never re-sent here.
    """
    pool = client.connection_pool
    try:
        conn = pool.get_connection()
    except TypeError:  # redis-py before 5.3 takes a command name (5.3 warns if given)
        conn = pool.get_connection("EVALSHA")
    try:
        conn.send_packed_command(conn.pack_commands(commands))
        out: list[Any] = []
        for _ in commands:
            try:
                out.append(conn.read_response())
            except redis.ResponseError as exc:
                out.append(exc)
        return out
    except BaseException:
        conn.disconnect()
        raise
    finally:
        pool.release(conn)


@dataclass(frozen=True)
class Call:
    """One script invocation: script name, KEYS and ARGV."""

    script: str
    keys: Sequence[str]
    args: Sequence[Any]


class ScriptRunner:
    """Runs named scripts on one Redis client or cluster, many per round trip.

    Args:
        client: a redis-py ``Redis`` or ``RedisCluster`` with ``decode_responses=False``.
        min_replicas: when > 0, a round trip holding a script of
            :data:`DURABLE_SCRIPTS` ends with ``WAIT min_replicas timeout`` and fails
            with :class:`ReplicationTimeoutError` if fewer replicas acknowledged.
        replica_timeout_ms: the WAIT timeout, milliseconds (> 0).
    """

    def __init__(
        self, client: Any, *, min_replicas: int = 0, replica_timeout_ms: int = 1000
    ) -> None:
        if min_replicas < 0 or replica_timeout_ms <= 0:
            raise ValueError("min_replicas must be >= 0 and replica_timeout_ms > 0")
        self._client = client
        self._cluster = is_cluster(client)
        self.min_replicas = min_replicas
        self.replica_timeout_ms = replica_timeout_ms
        self._sha = {}  # type: dict[str, str]

    def sha(self, name: str) -> str:
        """SHA1 of a script's expanded source (what EVALSHA takes)."""
        sha = self._sha.get(name)
        if sha is None:
            sha = hashlib.sha1(script_source(name).encode()).hexdigest()
            self._sha[name] = sha
        return sha

    def run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        """Run one script and return its reply.

        A NOSCRIPT reply (the server's script cache was flushed) is answered by sending
        the script's source (EVAL, which also caches it), at most
        :data:`SCRIPT_ATTEMPTS` sends in all.

        Raises:
            QueueConnectionError: Redis unreachable or the connection dropped.
            ReplicationTimeoutError: see :meth:`run_many`.
            QueueDataError: the script refused to run (a key of the wrong type);
                nothing was written.
            QueueLimitError: the call exceeds a script limit (a bug of the caller).
            ScriptUnavailableError: NOSCRIPT on every send.
            redis.ResponseError: the script itself failed (a bug, not a condition).
        """
        if self._cluster or (self.min_replicas and name in DURABLE_SCRIPTS):
            return self.run_many([Call(name, keys, args)])[0]
        # One script needs no pipeline: a plain EVALSHA saves redis-py's pipeline set-up,
        # a third of a single enqueue's client time.
        sha = self.sha(name)
        try:
            try:
                return self._client.evalsha(sha, len(keys), *keys, *args)
            except NoScriptError:
                for _ in range(SCRIPT_ATTEMPTS - 1):
                    try:
                        return self._client.eval(script_source(name), len(keys), *keys, *args)
                    except NoScriptError:  # pragma: no cover - EVAL never answers NOSCRIPT
                        continue
                raise ScriptUnavailableError(
                    f"script {name}: NOSCRIPT after {SCRIPT_ATTEMPTS} sends", [None]
                ) from None
        except UNAVAILABLE as exc:
            raise QueueConnectionError(f"Redis command failed: {exc}") from exc
        except redis.ResponseError as exc:
            raise translate(exc) from exc

    def run_many(
        self,
        calls: Sequence[Call],
        extra: Sequence[tuple[str, tuple[Any, ...]]] = (),
        *,
        partial: bool = False,
    ) -> list[Any]:
        """Run several scripts (and plain commands) in one pipelined round trip.

        Args:
            calls: the script calls, replied in order. On a cluster every call (and
                extra command) must touch the slot of the first call's first key.
            extra: plain commands ``(name, args)`` appended after the scripts (read-only
                commands such as LLEN on the same slot; re-sent after a redirect).
            partial: never discard what ran: instead of raising for one call's error
                (or for giving up on re-sends), put the error in that call's place
                (translated as below) and None in the place of a call that did not
                run. Connection loss still raises (then nothing is known).

        Returns:
            One reply per call, then one per extra command.

        Raises:
            QueueConnectionError: Redis unreachable, the connection dropped, or the
                cluster still redirecting after ``REDIRECT_ATTEMPTS`` re-sends.
            ReplicationTimeoutError: the scripts ran, but fewer than ``min_replicas``
                replicas acknowledged them in time (``.replies`` holds the replies).
            PartialRoundTripError: the cluster kept redirecting; ``.replies`` holds the
                replies of the calls that ran (None for those that did not).
            ScriptUnavailableError: NOSCRIPT persisted (``.replies`` as above).
            QueueDataError / QueueLimitError: a script refused to run (nothing of that
                call was written; the other calls ran).
            redis.ResponseError: a script failed for a reason other than NOSCRIPT.
        """
        commands: list[tuple[Any, ...]] = [
            ("EVALSHA", self.sha(c.script), len(c.keys), *c.keys, *c.args) for c in calls
        ]
        commands += [(name, *cargs) for name, cargs in extra]
        if not commands:
            return []
        slot_key = calls[0].keys[0] if calls and calls[0].keys else commands[0][1]
        replies: list[Any] = [None] * len(commands)
        todo = list(range(len(commands)))
        acked: int | None = None
        ran = [False] * len(commands)
        sends = 0  # rounds that met NOSCRIPT so far
        redirects = 0  # rounds that met a redirect so far
        for _round in range(REDIRECT_ATTEMPTS + SCRIPT_ATTEMPTS):
            target = node_client(self._client, slot_key) if self._cluster else self._client
            waits = self.min_replicas > 0 and any(
                i < len(calls) and calls[i].script in DURABLE_SCRIPTS for i in todo
            )
            sent = [commands[i] for i in todo]
            if waits:
                sent.append(("WAIT", self.min_replicas, self.replica_timeout_ms))
            out = self._send(target, sent)
            got = out.pop() if waits else None
            again, missing, moved = self._sort_replies(calls, todo, out, replies, ran)
            acked = self._acked(got, acked, moved)
            if not again:
                break
            kept = [r if ran[i] else None for i, r in enumerate(replies)]
            if missing:
                sends += 1
                if sends >= SCRIPT_ATTEMPTS:
                    if partial:
                        return kept
                    raise ScriptUnavailableError(
                        f"scripts {sorted(missing)}: NOSCRIPT after {sends} sends", kept
                    )
                _send_sources_next(calls, again, replies, commands)
            if moved:
                redirects += 1
                if redirects >= REDIRECT_ATTEMPTS:
                    if partial:
                        return kept
                    raise PartialRoundTripError(
                        f"still redirected after {REDIRECT_ATTEMPTS} tries"
                        f" (cluster topology changing); {sum(ran)} of {len(ran)} call(s) ran",
                        kept,
                    )
                refresh(self._client)
                pause(redirects - 1)
            todo = again
        else:  # pragma: no cover - each kind of re-send raises at its own bound first
            raise PartialRoundTripError("round trip re-sent too often", kept)
        replies = _finished(replies, partial=partial)
        if acked is not None and acked < self.min_replicas:
            raise ReplicationTimeoutError(acked, self.min_replicas, replies)
        return replies

    def _send(self, target: redis.Redis, sent: list[tuple[Any, ...]]) -> list[Any]:
        """One round of :meth:`run_many`: the replies to ``sent``, in order.

        Raises:
            QueueConnectionError: the round trip failed, or the connection died in the
                middle of the pipeline (some commands may have run); the cluster's
                view of its nodes is refreshed first.
        """
        try:
            out = round_trip(target, sent)
        except UNAVAILABLE as exc:
            refresh(self._client)
            raise QueueConnectionError(f"Redis command failed: {exc}") from exc
        lost = next((r for r in out if isinstance(r, UNAVAILABLE)), None)
        if lost is not None:  # the connection died mid-pipeline: some may have run
            refresh(self._client)
            raise QueueConnectionError(f"Redis command failed: {lost}") from lost
        return out

    def _sort_replies(
        self,
        calls: Sequence[Call],
        todo: list[int],
        out: list[Any],
        replies: list[Any],
        ran: list[bool],
    ) -> tuple[list[int], set[str], bool]:
        """Store one round's replies (``out``, for the commands ``todo``) in ``replies``.

        Marks in ``ran`` the commands that ran. Returns the commands to send again,
        the scripts that met NOSCRIPT, and whether any command was redirected.
        """
        again: list[int] = []
        missing: set[str] = set()
        moved = False
        for i, reply in zip(todo, out, strict=True):
            replies[i] = reply
            if isinstance(reply, NoScriptError) and i < len(calls):
                again.append(i)
                missing.add(calls[i].script)
            elif self._cluster and is_redirect(reply):
                again.append(i)
                moved = True
            else:
                ran[i] = True
        return again, missing, moved

    def _acked(self, got: Any, acked: int | None, moved: bool) -> int | None:
        """The fewest replicas acknowledging so far, after a round's WAIT reply ``got``.

        ``got`` is None when the round sent no WAIT.

        Raises:
            QueueConnectionError: the WAIT failed and no command was redirected.
        """
        if isinstance(got, Exception):
            # "WAIT cannot be used with replica instances": the node was demoted, and
            # the redirected commands are re-sent with a WAIT of their own
            if not moved:
                refresh(self._client)
                raise QueueConnectionError(f"WAIT failed: {got}") from got
            return acked
        if got is not None:
            return int(got) if acked is None else min(acked, int(got))
        return acked


def _send_sources_next(
    calls: Sequence[Call], again: list[int], replies: list[Any], commands: list[tuple[Any, ...]]
) -> None:
    """Replace, in ``commands``, the EVALSHA of each call that met NOSCRIPT by an EVAL.

    Sending the source itself (EVAL caches it): a cache flushed again between a
    SCRIPT LOAD and the EVALSHA cannot make the re-send fail.
    """
    for i in again:
        if i < len(calls) and isinstance(replies[i], NoScriptError):
            c = calls[i]
            source = script_source(c.script)
            commands[i] = ("EVAL", source, len(c.keys), *c.keys, *c.args)


def _finished(replies: list[Any], *, partial: bool) -> list[Any]:
    """The replies :meth:`ScriptRunner.run_many` returns once every command ran.

    With ``partial`` a script's refusal is translated in its place; without it the
    first error reply is raised (translated, see :func:`translate`).
    """
    if partial:
        return [translate(r) if isinstance(r, redis.ResponseError) else r for r in replies]
    for reply in replies:
        if isinstance(reply, redis.ResponseError):
            raise translate(reply)
        if isinstance(reply, Exception):
            raise reply
    return replies
