"""Step dependencies: a step may run only after other steps of its workflow succeeded.

A workflow definition names, per step, the steps it waits for (``after``) and
the outcome words that mean a finished step did *not* succeed (``halting``,
for example a business outcome such as "out of stock"). The outbox writes a
step with prerequisites as ``waiting``; it is never published in that state.
When a step that others wait for finishes (:meth:`StepGraph.releases`), the
completion tracker calls :func:`release_waiting` in the same unit of work: a
waiting step whose prerequisites are all done with a
non-halting outcome is released, and one with a prerequisite that halted
becomes ``skipped`` (final; it never runs, and the workflow completes without
it).

A released step becomes ``dispatched`` at once, with its dispatch time: the
caller publishes it right after its commit (``workflows.relay.publish_dispatched``,
with the message columns this statement returns, so nothing is read back and no
second transaction marks it), as every writer of step rows does (docs/adr/0017,
docs/adr/0028). A crash between that commit and the publish leaves a dispatched
step the queue does not know, which the relay sweep re-publishes after
``republish_after``, as for a step Redis lost; a refusal or an unreachable queue
puts the row back to ``pending``.

The graph lives in code, beside the definition, not in the database: rows
carry only their state. A step with no entry in ``after`` is never waiting.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Text, bindparam, cast, select, update
from sqlalchemy.orm import Session

from workflows.messages import DispatchedStep
from workflows.models import StepStatus, WorkflowStep
from workflows.sql import dialect_of, per_dialect

#: the ``outcome`` prefix of a step skipped because a prerequisite halted
SKIPPED_PREFIX = "skipped: "


@dataclass(frozen=True)
class StepGraph:
    """The dependencies of one kind of workflow.

    Attributes:
        after: step name -> names of the steps it waits for (all must succeed).
        halting: outcome words of a done step that mean it did not succeed; its
            dependents (and theirs) are skipped.
        compensations: step name -> name of the step that undoes its effect
            (see ``workflows.compensation``); a step without an entry has
            nothing to undo.
    """

    after: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    halting: frozenset[str] = frozenset()
    compensations: Mapping[str, str] = field(default_factory=dict)

    def waits(self, step: str) -> bool:
        """Return True when ``step`` has prerequisites (it starts ``waiting``)."""
        return bool(self.after.get(step))

    def releases(self, step: str) -> bool:
        """Return True when ``step`` is a prerequisite of some step.

        Only such a step's finish can decide a waiting step (:func:`release_waiting`):
        when any other step finishes, there is nothing to release or skip.
        """
        return any(step in prerequisites for prerequisites in self.after.values())

    def resolve(self, states: Mapping[str, tuple[str, str | None]]) -> dict[str, str]:
        """Decide the waiting steps of one workflow.

        Args:
            states: step name -> (status, outcome) of every step row.

        Returns:
            step name -> new status (``pending`` or ``skipped``) for each waiting
            step that can be decided now; undecided steps are left out. A step
            skipped here makes its own dependents skipped in the same call
            (bounded: at most one pass per step).
        """
        current = dict(states)
        decided: dict[str, str] = {}
        for _ in range(len(current)):
            changed = False
            for step, (status, _outcome) in current.items():
                if status != StepStatus.WAITING:
                    continue
                verdict = self._verdict(step, current)
                if verdict is not None:
                    decided[step] = verdict
                    current[step] = (verdict, None)
                    changed = True
            if not changed:
                break
        return decided

    def _verdict(self, step: str, states: Mapping[str, tuple[str, str | None]]) -> str | None:
        ready = True
        for prerequisite in self.after.get(step, ()):
            status, outcome = states.get(prerequisite, (StepStatus.SKIPPED, None))
            if status == StepStatus.SKIPPED:
                return StepStatus.SKIPPED
            if status == StepStatus.DONE and outcome in self.halting:
                return StepStatus.SKIPPED
            if status != StepStatus.DONE:
                ready = False
        return StepStatus.PENDING if ready else None


NO_DEPENDENCIES = StepGraph()
"""The graph of a plain fan-out: every step starts at once."""

_WS = WorkflowStep.__table__
# built once per dialect (workflows.sql): on a batch of one, building a statement
# costs more than running it.
# Only workflows that still have a waiting step can change: once their first step
# released the rest, a batch of any later step reads no rows here.
# SQLite (no statistics) would find those workflows through the status index,
# walking every waiting row of the database, under its write lock, in each
# batch: 6 ms instead of 0.4 ms at 24,000 waiting rows. ``Dialect.unindexed``
# (``status || ''``) keeps it on the (workflow_id, step) index; PostgreSQL plans
# from its statistics.
_STEPS_OF = per_dialect(
    lambda d: select(_WS.c.id, _WS.c.workflow_id, _WS.c.step, _WS.c.status, _WS.c.outcome).where(
        # the list outside the IN too where the planner does not carry it across
        # (PostgreSQL), or the outer rows are found by a scan of the whole table
        *d.one_of_again(_WS.c.workflow_id, "ids"),
        _WS.c.workflow_id.in_(
            select(_WS.c.workflow_id).where(
                d.one_of(_WS.c.workflow_id, "ids"),
                d.unindexed(_WS.c.status) == StepStatus.WAITING,
            )
        ),
    )
)
# RETURNING the message columns: the rows are read by the statement that moves
# them, with no second read. The payload comes back as its stored JSON text: a
# row whose payload does not decode must not fail the caller's transaction (the
# relay refuses that row alone when it publishes).
_RELEASE = per_dialect(
    lambda d: (
        update(_WS)
        .where(d.one_of(_WS.c.id, "ids"), _WS.c.status == StepStatus.WAITING)
        .values(
            status=StepStatus.DISPATCHED,
            dispatched_at=bindparam("now", type_=_WS.c.dispatched_at.type),
        )
        .returning(
            _WS.c.id,
            _WS.c.workflow_id,
            _WS.c.step,
            _WS.c.queue,
            _WS.c.task,
            cast(_WS.c.payload, Text),
            _WS.c.priority,
            _WS.c.fairness_key,
            _WS.c.traceparent,
            _WS.c.tracestate,
        )
    )
)
_SKIP = (
    update(_WS)
    .where(_WS.c.id == bindparam("row_id"), _WS.c.status == StepStatus.WAITING)
    .values(status=StepStatus.SKIPPED, outcome=bindparam("outcome"), finished_at=bindparam("now"))
)


def release_waiting(
    session: Session, graph: StepGraph, workflow_ids: Sequence[int], now: datetime
) -> dict[int, tuple[DispatchedStep, ...]]:
    """Release decidable waiting steps of some workflows (to ``dispatched``) or skip them.

    Runs inside the caller's unit of work (after the finishing step's row was
    flushed as done); commits nothing. Three set-based statements at most. The
    caller must publish the released rows right after its commit
    (``workflows.relay.publish_dispatched``): they are marked dispatched already,
    so only the sweep's check of dispatched steps would publish them otherwise.

    Args:
        session: the caller's session.
        graph: the workflows' dependency graph.
        workflow_ids: workflows to look at.
        now: time written as a released step's dispatch time and a skipped
            step's finish time (timezone-aware).

    Returns:
        Workflow id -> its step rows released (for the publish after the
        commit, ``workflows.relay.publish_dispatched``), in row id order;
        workflows with none released are absent. A row another transaction
        released first is not in it.
    """
    if not graph.after or not workflow_ids:
        return {}
    rows = session.execute(_STEPS_OF[dialect_of(session)], {"ids": sorted(set(workflow_ids))}).all()
    per_workflow: dict[int, dict[str, tuple[int, str, str | None]]] = defaultdict(dict)
    for row_id, wf_id, step, status, outcome in rows:
        per_workflow[wf_id][step] = (row_id, status, outcome)
    released: dict[int, list[int]] = defaultdict(list)
    skipped: list[dict[str, object]] = []
    for wf_id, steps in per_workflow.items():
        if not any(status == StepStatus.WAITING for _, status, _ in steps.values()):
            continue
        decided = graph.resolve({name: (s, o) for name, (_, s, o) in steps.items()})
        for name, verdict in decided.items():
            row_id = steps[name][0]
            if verdict == StepStatus.PENDING:
                released[wf_id].append(row_id)
            else:
                blockers = [p for p in graph.after.get(name, ()) if p in steps]
                skipped.append(
                    {"row_id": row_id, "outcome": (SKIPPED_PREFIX + ",".join(blockers))[:50]}
                )
    moved: dict[int, list[DispatchedStep]] = defaultdict(list)
    if released:
        for row in session.execute(
            _RELEASE[dialect_of(session)],
            {"ids": sorted(r for ids in released.values() for r in ids), "now": now},
        ).all():
            moved[row[1]].append(DispatchedStep(*row))
    if skipped:
        session.execute(_SKIP, [{**row, "now": now} for row in skipped])
    return {wf_id: tuple(sorted(rows)) for wf_id, rows in moved.items()}
