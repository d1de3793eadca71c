"""The audit: proof that every job is somewhere, and repair of those that are not.

The closed state machine (docs/adr): every job record is in exactly one of
``ready``, ``delayed``, ``active``, ``dead``, ``done``, and every member of those has
a record. The audit walks the records and every structure in bounded, cursor-based
steps (one read-only script per step, at most ``step`` entries each) and finds:

- orphans: a record in no structure. Nothing would ever run it. With ``repair`` it is
  put back on ``ready`` (its attempt count untouched) and its failure info says
  ``orphan_repaired``.
- doubles: an id in two structures at once (reported; a foreign writer's doing).
- members without a record: reported; the queue drops them by itself when they
  come up (fetch counts them as ``orphaned``, redrive and retention remove them).

- flow-control keys that hold another type than theirs (the ``paused`` hash, ADR 0031;
  the ``limit`` hash, ADR 0032; the ``keycap`` string, ADR 0033), or whose values do
  not read: reported in ``problems``, never repaired (``Queue.resume``,
  ``clear_limit`` and ``clear_key_cap`` remove such a key: the operator's decision).
- stale entries of the structures of priorities and fairness keys (a flow value
  without a record, a leaked running slot, a tag no waiting job carries; ADR 0033,
  ``reliable_queue.audit_flow``): with ``repair`` they are dropped.

Because jobs move while the audit walks, a record seen in no sorted set is only a
candidate; a final script re-checks each candidate atomically (including an LPOS
of ``ready``) before calling it an orphan, so a job that merely moved is never
reported or touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from . import codec
from .audit_flow import Budget, FlowFindings, scan, walk
from .audit_flow import repair as repair_flow
from .cluster import UNAVAILABLE
from .errors import QueueConnectionError
from .key_types import KEY_TYPES
from .limits import SCRIPT_BATCH
from .pausing import parse_state
from .priorities import parse_key_cap
from .rate_limits import parse_state as parse_limit_state
from .replies import text as _text

if TYPE_CHECKING:
    from .queue import Queue

#: Ids listed per kind in a report (the counts are always exact).
LISTED = 100
#: Candidates re-checked per confirm script (each may cost one LPOS of ``ready``).
CONFIRM_BATCH = 50
#: Fields of the stats hash holding the last completed audit's findings (gauges).
AUDIT_FIELDS = ("audit:orphans", "audit:doubles", "audit:no_record")
_KINDS = ("jobs", "ready", "delayed", "active", "dead", "done", "waiting")


@dataclass
class AuditReport:
    """What one audit found.

    Attributes:
        queue: queue name.
        orphans / doubles / no_record: how many of each were found (exact).
        repaired: orphans put back on ready (0 without ``repair``).
        examples: up to :data:`LISTED` ids of each kind
            (``{"orphans": [...], "doubles": [...], "no_record": [...]}``).
        problems: one line per flow-control key found unsound (a paused key of
            another type, a pause without a readable ``since``); never repaired.
        stale: stale entries of the flow structures found (exact; ADR 0033).
        stale_repaired: of those, dropped (or completed) by the repair.
        steps: script calls made.
        complete: False when ``max_steps`` ended the walk early (counts are then
            lower bounds, orphans are not looked for, and nothing is stored as the
            queue's audit gauges).
    """

    queue: str
    orphans: int = 0
    doubles: int = 0
    no_record: int = 0
    repaired: int = 0
    examples: dict[str, list[str]] = field(
        default_factory=lambda: {"orphans": [], "doubles": [], "no_record": [], "stale": []}
    )
    steps: int = 0
    complete: bool = True
    problems: list[str] = field(default_factory=list)
    stale: int = 0
    stale_repaired: int = 0

    @property
    def clean(self) -> bool:
        """True when nothing was found."""
        return not (self.orphans or self.doubles or self.no_record or self.problems or self.stale)

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON output."""
        return {
            "queue": self.queue,
            "orphans": self.orphans,
            "doubles": self.doubles,
            "no_record": self.no_record,
            "repaired": self.repaired,
            "examples": {k: list(v) for k, v in self.examples.items()},
            "steps": self.steps,
            "complete": self.complete,
            "problems": list(self.problems),
            "stale": self.stale,
            "stale_repaired": self.stale_repaired,
        }


def _ids(reply: list[Any], at: int) -> tuple[list[bytes | str], int]:
    n = int(reply[at])
    return list(reply[at + 1 : at + 1 + n]), at + 1 + n


def _show(raw: bytes | str) -> str:
    # ids are shown, never trusted: undecodable bytes are escaped, not raised
    return raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else raw


def audit(
    queue: Queue,
    *,
    repair: bool = False,
    step: int = 200,
    max_steps: int | None = None,
    record: bool = True,
) -> AuditReport:
    """Walk the queue's records and structures in bounded steps; see the module doc.

    Args:
        queue: the queue to audit.
        repair: put orphans back on ready (attempt not counted, reason in the info).
        step: entries per script call, 1..500 (a record scan step also carries the
            records' bytes, so keep it small when payloads are large).
        max_steps: stop after this many script calls (None: walk everything; the
            cost is about ``(records + members) / step`` calls).
        record: store the findings of a complete audit in the stats hash
            (``audit:orphans`` / ``audit:doubles`` / ``audit:no_record``), where
            :func:`~reliable_queue.stats` and the metrics read them.

    Returns:
        An :class:`AuditReport`.

    Raises:
        QueueConnectionError: Redis unreachable.
        QueueDataError: a queue key holds the wrong type.
        ValueError: ``step`` outside 1..500.
    """
    if not 1 <= step <= SCRIPT_BATCH:
        raise ValueError(f"audit step must be 1..{SCRIPT_BATCH}")
    report = AuditReport(queue.name)
    # ids stay raw bytes until shown: an id that is not UTF-8 must be found again as is
    candidates: list[bytes | str] = []
    ready: set[bytes | str] = set()
    doubles: set[bytes | str] = set()
    no_record: set[bytes | str] = set()
    report.problems = flow_problems(queue)
    keys = queue.keys.flow_keys()
    budget = Budget(max_steps)
    for kind in _KINDS:
        for reply in walk(queue, keys, kind, step, budget):
            first, at = _ids(reply, 1)
            found_doubles, at = _ids(reply, at)
            missing, _ = _ids(reply, at)
            if kind == "jobs":
                candidates.extend(first)
            elif kind == "ready":
                ready.update(first)
            doubles.update(found_doubles)
            no_record.update(missing)
    stale = FlowFindings()
    if not budget.out:
        stale = scan(queue, keys, step, budget)
    report.steps = budget.spent
    report.complete = not budget.out
    # records in no sorted set and not seen in ready: re-check each atomically
    # (a walk cut short has not seen all of ready: its candidates are not re-checked)
    suspects = [c for c in dict.fromkeys(candidates) if c not in ready] if report.complete else []
    orphans: list[bytes | str] = []
    info = codec.dumps(
        {
            "reason": "orphan_repaired",
            "error": "the job was in no structure (found by the audit); put back on ready,"
            " attempt not counted",
            "at": queue.clock(),
        }
    )
    for i in range(0, len(suspects), CONFIRM_BATCH):
        part = suspects[i : i + CONFIRM_BATCH]
        args = [1 if repair else 0, queue.settings.wake_tokens, info, *part]
        orphans.extend(queue.scripts.run("audit_confirm", keys, args))
        report.steps += 1
    report.stale = stale.count if report.complete else 0
    if repair and report.stale:
        report.stale_repaired, steps = repair_flow(queue, keys, stale)
        report.steps += steps
    report.orphans = len(orphans)
    report.repaired = len(orphans) if repair else 0
    report.doubles = len(doubles)
    report.no_record = len(no_record)
    report.examples = {
        "orphans": [_show(x) for x in orphans[:LISTED]],
        "doubles": sorted(_show(x) for x in doubles)[:LISTED],
        "no_record": sorted(_show(x) for x in no_record)[:LISTED],
        "stale": stale.shown()[:LISTED] if report.complete else [],
    }
    if record and report.complete:
        left = report.orphans - report.repaired
        values = dict(zip(AUDIT_FIELDS, (left, report.doubles, report.no_record), strict=True))
        try:
            queue.client.hset(queue.keys.key("stats"), mapping=values)
        except UNAVAILABLE as exc:
            raise QueueConnectionError(str(exc)) from exc
    return report


def flow_problems(queue: Queue) -> list[str]:
    """What is unsound in the flow-control keys of ``queue``: one line each, [] when none.

    The ``paused`` key must be absent or a hash with an integer ``since`` (what
    ``Queue.pause`` writes); the ``limit`` key absent or a hash of four integers; the
    ``keycap`` key absent or a string holding an integer >= 1; the structures of
    priorities and fairness keys (``waiting``, ``flow``, ``tags``, ``running``) absent
    or of their types. One round trip.

    Raises:
        QueueConnectionError: Redis unreachable.
    """
    key, lkey, ckey = queue.keys.paused, queue.keys.limit, queue.keys.key("keycap")
    others = ("waiting", "flow", "tags", "running")
    try:
        pipe = queue.client.pipeline(transaction=True)
        pipe.type(key)
        pipe.hget(key, "since")
        pipe.type(lkey)
        pipe.hgetall(lkey)
        pipe.type(ckey)
        pipe.get(ckey)
        for kind in others:
            pipe.type(queue.keys.key(kind))
        kind, since, lkind, limit, ckind, cap, *types = pipe.execute(raise_on_error=False)
    except UNAVAILABLE as exc:
        raise QueueConnectionError(str(exc)) from exc
    found = _paused_problems(key, _text(kind), since) + _limit_problems(lkey, _text(lkind), limit)
    if _text(ckind) not in ("none", "string"):
        found.append(
            f"key {ckey} holds a {_text(ckind)}, expected a string: fetch refuses to lease"
            " until it is removed (`orders queue cap STEP --clear` removes it)"
        )
    elif _text(ckind) == "string" and parse_key_cap(cap) is None:
        found.append(
            f"key {ckey}: the per-key cap is not an integer >= 1: fetch refuses to lease"
            " until it is set again or cleared"
        )
    for name, found_type in zip(others, types, strict=True):
        want = KEY_TYPES[name]
        if _text(found_type) not in ("none", want):
            found.append(
                f"key {queue.keys.key(name)} holds a {_text(found_type)}, expected a {want}:"
                " the scripts that move a job refuse until it is removed"
            )
    return found


def _paused_problems(key: str, kind: str, since: Any) -> list[str]:
    if kind == "none":
        return []
    if kind != KEY_TYPES["paused"]:
        return [
            f"key {key} holds a {kind}, expected a {KEY_TYPES['paused']}: fetch refuses to"
            " lease until it is removed (`resume` removes it)"
        ]
    state = parse_state({b"since": since}) if since is not None else None
    if state is None or state.since is None:
        return [f"key {key}: the queue is paused, but since when is not readable"]
    return []


def _limit_problems(key: str, kind: str, raw: Any) -> list[str]:
    if kind == "none":
        return []
    if kind != KEY_TYPES["limit"]:
        return [
            f"key {key} holds a {kind}, expected a {KEY_TYPES['limit']}: fetch refuses to"
            " lease until it is removed (`orders queue limit STEP --clear` removes it)"
        ]
    fields = {_text(k): _text(v) for k, v in (raw or {}).items()}
    sound = parse_limit_state(raw) is not None and all(
        fields.get(f, "0").isascii()
        and fields.get(f, "0").isdigit()
        and len(fields.get(f, "0")) <= 16
        for f in ("n", "per", "start", "used")
    )
    if not sound:
        return [
            f"key {key}: the rate limit is not readable (n, per, start, used must be integers,"
            " n and per >= 1): fetch refuses to lease until it is set again or cleared"
        ]
    return []


__all__ = ["AUDIT_FIELDS", "AuditReport", "audit", "flow_problems"]
