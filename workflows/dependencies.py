"""Step dependencies: a step may run only after other steps of its workflow succeeded.

A workflow definition names, per step, the steps it waits for (``after``) and
the outcome words that mean a finished step did *not* succeed (``halting``,
for example a business outcome such as "out of stock"). The outbox writes a
step with prerequisites as ``waiting``; it is never published in that state.
When a step finishes, the completion tracker calls :func:`release_waiting` in
the same unit of work: a waiting step whose prerequisites are all done with a
non-halting outcome becomes ``pending`` (the relay publishes it), and one with
a prerequisite that halted becomes ``skipped`` (final; it never runs, and the
workflow completes without it).

The graph lives in code, beside the definition, not in the database: rows
carry only their state. A step with no entry in ``after`` is never waiting.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import bindparam, select, update
from sqlalchemy.orm import Session

from workflows.idlists import is_postgresql, one_of
from workflows.models import StepStatus, WorkflowStep

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
# built once: on a batch of one, building a statement costs more than running it
# keyed by "runs on PostgreSQL": there the id list is one array (workflows.idlists).
# Only workflows that still have a waiting step can change: once their first step
# released the rest, a batch of any later step reads no rows here.
_STEPS_OF = {
    pg: select(_WS.c.id, _WS.c.workflow_id, _WS.c.step, _WS.c.status, _WS.c.outcome).where(
        _WS.c.workflow_id.in_(
            select(_WS.c.workflow_id).where(
                one_of(_WS.c.workflow_id, "ids", postgresql=pg),
                _WS.c.status == StepStatus.WAITING,
            )
        )
    )
    for pg in (False, True)
}
_RELEASE = {
    pg: update(_WS)
    .where(one_of(_WS.c.id, "ids", postgresql=pg), _WS.c.status == StepStatus.WAITING)
    .values(status=StepStatus.PENDING)
    for pg in (False, True)
}
_SKIP = (
    update(_WS)
    .where(_WS.c.id == bindparam("row_id"), _WS.c.status == StepStatus.WAITING)
    .values(status=StepStatus.SKIPPED, outcome=bindparam("outcome"), finished_at=bindparam("now"))
)


def release_waiting(
    session: Session, graph: StepGraph, workflow_ids: Sequence[int], now: datetime
) -> dict[int, tuple[int, ...]]:
    """Move decidable waiting steps of some workflows to ``pending`` or ``skipped``.

    Runs inside the caller's unit of work (after the finishing step's row was
    flushed as done); commits nothing. Two set-based statements at most.

    Args:
        session: the caller's session.
        graph: the workflows' dependency graph.
        workflow_ids: workflows to look at.
        now: time written as a skipped step's finish time (timezone-aware).

    Returns:
        Workflow id -> ids of its step rows released to ``pending`` (for an
        immediate publish); workflows with none released are absent.
    """
    if not graph.after or not workflow_ids:
        return {}
    rows = session.execute(
        _STEPS_OF[is_postgresql(session)], {"ids": sorted(set(workflow_ids))}
    ).all()
    per_workflow: dict[int, dict[str, tuple[int, str, str | None]]] = defaultdict(dict)
    for row_id, wf_id, step, status, outcome in rows:
        per_workflow[wf_id][step] = (row_id, status, outcome)
    released: dict[int, tuple[int, ...]] = {}
    skipped: list[dict[str, object]] = []
    for wf_id, steps in per_workflow.items():
        if not any(status == StepStatus.WAITING for _, status, _ in steps.values()):
            continue
        decided = graph.resolve({name: (s, o) for name, (_, s, o) in steps.items()})
        for name, verdict in decided.items():
            row_id = steps[name][0]
            if verdict == StepStatus.PENDING:
                released[wf_id] = (*released.get(wf_id, ()), row_id)
            else:
                blockers = [p for p in graph.after.get(name, ()) if p in steps]
                skipped.append(
                    {"row_id": row_id, "outcome": (SKIPPED_PREFIX + ",".join(blockers))[:50]}
                )
    if released:
        session.execute(
            _RELEASE[is_postgresql(session)],
            {"ids": sorted(r for ids in released.values() for r in ids)},
        )
    if skipped:
        session.execute(_SKIP, [{**row, "now": now} for row in skipped])
    return {wf_id: tuple(sorted(ids)) for wf_id, ids in released.items()}
