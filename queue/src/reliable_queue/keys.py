"""All Redis key names of one queue, built in one place.

Every key of a queue shares the Redis Cluster hash tag ``{<name>}`` so every
Lua script touches a single slot. Keys reach scripts only through ``KEYS``.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Order of the keys every state-changing script receives as KEYS[1..12].
#: The Lua files document the same order in their headers.
KEY_ORDER = (
    "ready",  # LIST of job ids waiting to run (LPUSH in, RPOP out: FIFO)
    "delayed",  # ZSET job id -> due time (ms, queue clock: Redis TIME + offset, ADR 0022)
    "active",  # ZSET job id -> lease deadline (ms, queue clock)
    "jobs",  # HASH job id -> JSON record {t, p, e, m, k}
    "attempts",  # HASH job id -> deliveries so far
    "leases",  # HASH job id -> current lease token "<seq>:<worker id>"
    "dead",  # ZSET job id -> time dead-lettered (ms)
    "info",  # HASH job id -> JSON {reason, error, traceback, ...} of the last failure
    "done",  # ZSET job id -> finish time (ms); trimmed after the retention window
    "stats",  # HASH counter -> integer; clock:last_ms / clock:offset_ms (queue clock)
    "seq",  # STRING fencing-token sequence: max(seq + 1, queue ms * 1000) per lease
    "wake",  # LIST of wake-up tokens idle workers block on (BLPOP)
)

#: Keys of flow control, outside :data:`KEY_ORDER`: absent while the control is not
#: in use; passed as KEYS[13..19] after KEYS[1..12] to every script that moves a job
#: (all but ``extend`` and ``raise_fencing_floor``; ``ack``, the drain's, takes only the
#: first two: every key passed costs a call about 700 redis-server instructions).
FLOW_KEYS = (
    "running",  # ZSET "<fairness key> NUL <job id>" (score 0) leased under a key cap (ADR 0033)
    "flow",  # HASH job id -> "[f]<priority>|<fairness key>", only for such jobs (ADR 0033)
    "waiting",  # ZSET job id -> band * 2^48 + tag: prioritized / keyed jobs waiting (ADR 0033)
    "tags",  # HASH fair-queueing tags: v<band>, <band><key>, r, n, s (ADR 0033)
    "keycap",  # STRING K: at most K leased jobs per fairness key (ADR 0033)
    "paused",  # HASH {since (ms, queue clock), by, reason} while the queue is paused (ADR 0031)
    "limit",  # HASH {n, per (ms), start (queue ms), used} while a rate limit is set (ADR 0032)
)


def validate_name(name: str) -> str:
    """Check a queue name or prefix: non-empty, no braces or whitespace.

    Args:
        name: the candidate name.

    Returns:
        The name unchanged.

    Raises:
        ValueError: if it is empty, contains ``{``, ``}``, ``:`` or whitespace.
    """
    if not name or any(c in name for c in "{}: \t\r\n"):
        raise ValueError(f"invalid queue name or prefix {name!r}: no braces, colons or spaces")
    return name


@dataclass(frozen=True)
class QueueKeys:
    """Key names of one queue: ``<prefix>:{<name>}:<kind>``.

    Attributes:
        prefix: namespace shared by all queues of one application (or test).
        name: the queue name; it becomes the hash tag.
    """

    prefix: str
    name: str

    def __post_init__(self) -> None:
        validate_name(self.prefix)
        validate_name(self.name)

    @property
    def base(self) -> str:
        """``<prefix>:{<name>}``: the part every key of this queue starts with."""
        return f"{self.prefix}:{{{self.name}}}"

    def key(self, kind: str) -> str:
        """The full key of one structure, e.g. ``key("ready")``."""
        return f"{self.base}:{kind}"

    def script_keys(self) -> list[str]:
        """KEYS[1..12] in :data:`KEY_ORDER`, as every state-changing script expects."""
        return [self.key(kind) for kind in KEY_ORDER]

    @property
    def paused(self) -> str:
        """The HASH that exists while the queue is paused (``since``, ``by``, ``reason``)."""
        return self.key("paused")

    @property
    def limit(self) -> str:
        """The HASH that exists while the queue has a rate limit (``n`` jobs per ``per`` ms)."""
        return self.key("limit")

    def flow_keys(self) -> list[str]:
        """KEYS[1..19]: :meth:`script_keys` then :data:`FLOW_KEYS`, as the scripts that move
        a job expect."""
        return [*self.script_keys(), *(self.key(kind) for kind in FLOW_KEYS)]

    def idempotency_key(self, key: str) -> str:
        """The STRING key that maps an idempotency key to the first job id."""
        return f"{self.base}:idem:{key}"

    @property
    def registry(self) -> str:
        """SET of queue names known under this prefix (outside any hash tag)."""
        return f"{self.prefix}:queues"


#: The hash tag of the worker processes' presence keys: queue names cannot hold ``:``
#: (:func:`validate_name`), so no queue's ``{<name>}`` is ever this one.
WORKERS_TAG = "{:workers}"


@dataclass(frozen=True)
class WorkerKeys:
    """Key names of the worker processes' presence under one prefix (ADR 0043).

    Both keys share the hash tag :data:`WORKERS_TAG`, so the presence script touches one
    slot on Redis Cluster. They hold no job: a job's place is never read from them.

    Attributes:
        prefix: the namespace shared with the queues.
    """

    prefix: str

    def __post_init__(self) -> None:
        validate_name(self.prefix)

    @property
    def seen(self) -> str:
        """ZSET worker id -> when it last published its state (ms, Redis TIME)."""
        return f"{self.prefix}:{WORKERS_TAG}:seen"

    @property
    def states(self) -> str:
        """HASH worker id -> the JSON state it last published (``reliable_queue.presence``)."""
        return f"{self.prefix}:{WORKERS_TAG}:states"
