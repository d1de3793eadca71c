"""The audit's part for the structures of priorities and fairness keys (ADR 0033).

Besides where each job is (``reliable_queue.audit``), four kinds of entries can be
stale, each found in bounded script steps and, with repair, dropped by a script that
checks it is still stale first (so an entry that changed meanwhile is left alone):

- a ``flow`` value whose job record is gone, or that does not read;
- a ``running`` slot whose job is not active, or not of the slot's key: a leaked slot;
- a ``tags`` entry that no waiting job carries: a key's last tag, or a field of no
  known shape (deleted only if its value is still the one seen);
- a ``waiting`` member without a flow value (given ``"<its band>|"``, so it keeps its
  place).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .limits import SCRIPT_BATCH
from .priorities import parse_flow_value
from .replies import text as _text

if TYPE_CHECKING:
    from .queue import Queue

#: 2**48: a waiting job's score is band * BAND + tag (``lua/_common.lua``).
BAND = 2**48
#: Tags fields of a known shape besides a key's last tag (``<band><key>``).
_SCALARS = {b"r", b"n", *(f"v{b}".encode() for b in range(10))}


@dataclass
class FlowFindings:
    """Stale entries found by one walk: ids, slot members, (field, value) pairs."""

    flow: list[Any] = field(default_factory=list)
    running: list[Any] = field(default_factory=list)
    tags: list[tuple[Any, Any]] = field(default_factory=list)
    waiting: list[Any] = field(default_factory=list)

    @property
    def count(self) -> int:
        """How many entries were found stale."""
        return len(self.flow) + len(self.running) + len(self.tags) + len(self.waiting)

    def shown(self) -> list[str]:
        """One line per entry, ids and keys escaped (``flow <id>``, ``tags <field>``)."""
        out = [f"flow {_show(x)}" for x in self.flow]
        out += [f"running {_show(x).replace(chr(0), ' / ')}" for x in self.running]
        out += [f"tags {_show(f)}" for f, _ in self.tags]
        out += [f"waiting {_show(x)}" for x in self.waiting]
        return out


def _show(raw: Any) -> str:
    return raw.decode("utf-8", "backslashreplace") if isinstance(raw, bytes) else str(raw)


class Budget:
    """Script calls an audit may still make (None: no bound)."""

    def __init__(self, calls: int | None) -> None:
        self.left = calls
        self.spent = 0
        self.out = False  # a walk was cut short

    def take(self) -> bool:
        """Count one call; False (and ``out``) when none is left."""
        if self.left is not None and self.spent >= self.left:
            self.out = True
            return False
        self.spent += 1
        return True


def walk(
    queue: Queue, keys: Sequence[str], kind: str, step: int, budget: Budget
) -> Iterator[list[Any]]:
    """The replies of one structure's ``audit_scan`` steps, in order (one script each),
    until the structure is walked or the budget is spent."""
    cursor = "0"
    while budget.take():
        reply = queue.scripts.run("audit_scan", keys, [kind, cursor, step])
        yield reply
        cursor = _text(reply[0])
        if cursor == "0":
            return


def _first(reply: list[Any]) -> list[Any]:
    n = int(reply[1])
    return list(reply[2 : 2 + n])


def _tag_is_stale(name: bytes, value: bytes, carried: set[tuple[int, bytes, int]]) -> bool:
    """Whether a tags entry is stale: of no known shape, or a key's last tag no waiting
    job carries (``carried``: (band, key, tag) of every waiting job)."""
    if not value.isdigit() or len(value) > 16:
        return True
    if name in _SCALARS:
        return False
    if name == b"s":
        return not 0 <= int(value) <= 9
    if not name[:1].isdigit():
        return True
    return (int(name[:1]), name[1:], int(value)) not in carried


def scan(queue: Queue, keys: Sequence[str], step: int, budget: Budget) -> FlowFindings:
    """Walk tags, then waiting, flow and running; the stale entries found (complete
    unless ``budget.out``).

    Tags are walked first: a key's last tag changes whenever a waiting job gets a newer
    one, so an entry seen before the waiting walk without a job carrying it, and still
    holding that value at the repair, is stale.
    """
    found = FlowFindings()
    tags: list[tuple[bytes, bytes]] = []
    for reply in walk(queue, keys, "tags", step, budget):
        items = [x if isinstance(x, bytes) else str(x).encode() for x in _first(reply)]
        tags.extend(zip(items[::2], items[1::2], strict=True))
    carried: set[tuple[int, bytes, int]] = set()
    for reply in walk(queue, keys, "waiting", step, budget):
        items = _first(reply)
        for member, score, value in zip(items[::3], items[1::3], items[2::3], strict=True):
            raw = value if isinstance(value, bytes) else str(value).encode()
            key = raw.removeprefix(b"f")[2:]
            if not raw or parse_flow_value(raw) is None:
                found.waiting.append(member)  # the repair gives it "<band>|": no key
                key = b""
            number = float(score)
            if abs(number) < 2**53:  # a foreign score (inf, huge) carries no tag
                band = min(max(int(number // BAND), 0), 9)
                carried.add((band, key, int(number) - band * BAND))
    found.tags = [(n, v) for n, v in tags if _tag_is_stale(n, v, carried)]
    for kind in ("flow", "running"):
        for reply in walk(queue, keys, kind, step, budget):
            items = _first(reply)
            if kind == "flow":  # ids, a malformed one followed by '!'
                found.flow.extend(x for x in items if x not in (b"!", "!"))
            else:
                found.running.extend(items)
    return found


def repair(queue: Queue, keys: Sequence[str], found: FlowFindings) -> tuple[int, int]:
    """Drop (or, for a waiting member, complete) what is still stale; returns the
    entries repaired and the steps taken."""
    repaired = steps = 0
    batches: list[tuple[str, list[Any]]] = [
        ("flow", found.flow),
        ("running", found.running),
        ("tags", [x for pair in found.tags for x in pair]),
        ("waiting", found.waiting),
    ]
    for what, items in batches:
        width = 2 if what == "tags" else 1
        size = SCRIPT_BATCH - SCRIPT_BATCH % width
        for i in range(0, len(items), size):
            done = queue.scripts.run("audit_confirm", keys, ["stale", what, *items[i : i + size]])
            repaired += len(done)
            steps += 1
    return repaired, steps


__all__ = ["Budget", "FlowFindings", "repair", "scan", "walk"]
