"""Find a job by a prefix of its id, as git finds a commit: exact id first, then a unique prefix.

A person copies ids from a table that shows only a prefix; commands that take
a job id accept any unique prefix of at least :data:`MIN_PREFIX` characters.
The search reads the queue's job records and its DLQ (a dead letter whose
record is gone is still found) with HSCAN / ZSCAN, bounded per call by
``scan_limit`` entries per structure. An id that is not UTF-8 text is found by its
``hex:`` form (:mod:`reliable_queue.raw_ids`), or a prefix of it; a structure whose
key holds another type is left out of the search and named in the not-found message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from .cluster import UNAVAILABLE
from .codec import check_text
from .errors import QueueConnectionError, QueueError
from .key_types import checked
from .raw_ids import HEX_PREFIX, id_member, id_text

if TYPE_CHECKING:
    from .queue import Queue

MIN_PREFIX = 6
"""Shortest prefix searched for (an exact id of any length is always found)."""

SCAN_LIMIT = 200_000
"""Entries examined at most per structure (job records, DLQ) of one queue per lookup."""

SHOWN_CANDIDATES = 10
"""Candidates named by :class:`AmbiguousJobIdError` at most."""

_PAGE = 1000
_GLOB = re.compile(rb"([*?\[\]\\^-])")


def _glob(raw: bytes) -> bytes:
    """``raw`` with every glob character escaped, then ``*``: a SCAN pattern for a prefix."""
    return _GLOB.sub(rb"\\\1", raw) + b"*"


class JobIdLookupError(QueueError):
    """A job id or prefix did not name exactly one job."""


class JobIdNotFoundError(JobIdLookupError):
    """No job id starts with the prefix (or the prefix is too short to search)."""


class JobIdTooShortError(JobIdNotFoundError):
    """The prefix is shorter than :data:`MIN_PREFIX` and no job has it as its whole id.

    A usage mistake rather than a missing job: callers may report it as bad usage.

    Attributes:
        prefix: what was asked for.
    """

    def __init__(self, prefix: str, where: str) -> None:
        self.prefix = prefix
        super().__init__(
            f"job id prefix {prefix!r} is too short: give at least {MIN_PREFIX} characters "
            f"(or the whole id); no {where} holds a job with that exact id"
        )


class AmbiguousJobIdError(JobIdLookupError):
    """Several job ids start with the prefix.

    Attributes:
        prefix: what was asked for.
        candidates: ``(queue name, job id)`` pairs, at most :data:`SHOWN_CANDIDATES`.
    """

    def __init__(self, prefix: str, candidates: list[tuple[str, str]], more: bool) -> None:
        self.prefix = prefix
        self.candidates = candidates
        listed = ", ".join(f"{job_id} ({queue})" for queue, job_id in candidates)
        super().__init__(
            f"job id prefix {prefix!r} is ambiguous: {listed}{', ...' if more else ''}; "
            "give more characters"
        )


@dataclass(frozen=True)
class Match:
    """A job found by :func:`find_job`: its queue and its full id."""

    queue: Queue
    job_id: str


def _read(queue: Queue, command: str, key: str, want: str, problems: list[str], *args: Any) -> Any:
    """``command`` on ``key``; None (and a note in ``problems``) when the key holds another type."""
    try:
        return getattr(queue.client, command)(key, *args)
    except redis.ResponseError as exc:
        _, problem = checked(queue.client, exc, key, want)
        problems.append(f"queue {queue.name}: {problem}")
        return None


def _exact(queue: Queue, job_id: str, dead_only: bool, problems: list[str]) -> bool:
    k = queue.keys
    member = id_member(job_id)
    if _read(queue, "zscore", k.key("dead"), "zset", problems, member) is not None:
        return True
    return not dead_only and bool(_read(queue, "hexists", k.key("jobs"), "hash", problems, member))


def _patterns(prefix: str) -> list[bytes]:
    """The SCAN patterns that find ids whose text starts with ``prefix``: the prefix
    itself, and for a ``hex:`` prefix also the bytes its whole hex digit pairs spell."""
    out = [_glob(prefix.encode("utf-8"))]
    digits = prefix[len(HEX_PREFIX) :] if prefix.startswith(HEX_PREFIX) else ""
    digits = digits[: len(digits) - len(digits) % 2]
    try:
        if digits or prefix == HEX_PREFIX:
            out.append(_glob(bytes.fromhex(digits)))
    except ValueError:  # not hex digits: only the text pattern
        pass
    return out


def _scan(
    queue: Queue, prefix: str, dead_only: bool, scan_limit: int, want: int, problems: list[str]
) -> tuple[set[str], bool]:
    """Ids starting with ``prefix``, and whether every structure was scanned to its end."""
    k = queue.keys
    found: set[str] = set()
    complete = True
    structures = [("zscan", k.key("dead"), "zset")]
    if not dead_only:
        structures.insert(0, ("hscan", k.key("jobs"), "hash"))
    for command, key, kind in structures:
        for pattern in _patterns(prefix):
            cursor, seen = 0, 0
            while True:
                reply = _read(queue, command, key, kind, problems, cursor, pattern, _PAGE)
                if reply is None:
                    break
                cursor, page = reply
                members = page.keys() if isinstance(page, dict) else (m for m, _ in page)
                found.update(t for m in members if (t := id_text(m)).startswith(prefix))
                seen += _PAGE
                if int(cursor) == 0 or len(found) >= want:
                    break
                if seen >= scan_limit:
                    complete = False
                    break
            if reply is None:
                break
    return found, complete


def find_job(
    queues: Iterable[Queue],
    prefix: str,
    *,
    dead_only: bool = False,
    scan_limit: int = SCAN_LIMIT,
) -> Match:
    """The one job whose id is ``prefix`` or starts with it, in any of ``queues``.

    Args:
        queues: where to look (e.g. every step queue).
        prefix: a full job id, or at least :data:`MIN_PREFIX` of its first characters
            (a non-UTF-8 id: its ``hex:`` form, or a prefix of that).
        dead_only: look only in the dead-letter queues.
        scan_limit: entries examined at most per structure and queue (bounds the
            cost on a very large queue; a longer prefix is then needed).

    Returns:
        The queue holding the job and the job's full id.

    Raises:
        JobIdTooShortError: the prefix is shorter than :data:`MIN_PREFIX` and is
            not an exact id (a :class:`JobIdNotFoundError`).
        JobIdNotFoundError: nothing matches.
        AmbiguousJobIdError: more than one id matches (candidates listed).
        InvalidTextError: ``prefix`` holds a lone surrogate.
        QueueConnectionError: Redis unreachable.
    """
    queues = list(queues)
    check_text("job id", prefix)
    where = "dead-letter queue" if dead_only else "queue"
    problems: list[str] = []
    try:
        for queue in queues:
            if _exact(queue, prefix, dead_only, problems):
                return Match(queue, prefix)
        if len(prefix) < MIN_PREFIX:
            raise JobIdTooShortError(prefix, where)
        matches: list[tuple[str, str]] = []
        by_name = {q.name: q for q in queues}
        complete = True
        for queue in queues:
            found, whole = _scan(
                queue, prefix, dead_only, scan_limit, SHOWN_CANDIDATES + 1, problems
            )
            complete = complete and whole
            matches.extend((queue.name, job_id) for job_id in sorted(found))
    except UNAVAILABLE as exc:
        raise QueueConnectionError(str(exc)) from exc
    if not matches:
        searched = (
            ""
            if complete
            else f" (searched the first {scan_limit} entries: give more characters or the full id)"
        )
        unread = f"; not searched: {'; '.join(dict.fromkeys(problems))}" if problems else ""
        raise JobIdNotFoundError(
            f"no job id starting with {prefix!r} in any {where}{searched}{unread}"
        )
    if len(matches) > 1:
        raise AmbiguousJobIdError(
            prefix, matches[:SHOWN_CANDIDATES], more=len(matches) > SHOWN_CANDIDATES
        )
    name, job_id = matches[0]
    return Match(by_name[name], job_id)
