"""Generic workflow tables: one workflow row per fan-out, one row per step.

``Base`` carries the single metadata (with a naming convention) shared by the
workflow tables and the domain tables, so one Alembic history covers both.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, Integer, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from reliable_queue import DEAD_REASONS
from reliable_queue.trace_context import MAX_TRACESTATE_CHARS, TRACEPARENT_CHARS
from workflows.columns import UTCDateTime

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    """Declarative base of every table; one metadata for one migration history."""

    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class WorkflowStatus:
    """Values of ``workflows.status``."""

    RUNNING = "running"
    DONE = "done"
    BLOCKED = "blocked"


class StepStatus:
    """Values of ``workflow_steps.status``.

    pending: written by the outbox, not yet published; dispatched: published to
    the queue; failed: the last attempt raised and the queue will retry; done:
    effect committed; dead: the queue dead-lettered the job; unpublishable: the
    relay gave up publishing the row after its publish attempts (reason in
    ``publish_error``; ``orders outbox retry`` puts it back to pending);
    waiting: held back until the steps it depends on succeeded (never
    published in this state, see ``workflows.dependencies``); skipped: a step
    it depends on did not succeed, so it never runs (final, like done).
    """

    PENDING = "pending"
    DISPATCHED = "dispatched"
    FAILED = "failed"
    DONE = "done"
    DEAD = "dead"
    UNPUBLISHABLE = "unpublishable"
    WAITING = "waiting"
    SKIPPED = "skipped"

    ALL = (WAITING, PENDING, DISPATCHED, FAILED, DONE, SKIPPED, DEAD, UNPUBLISHABLE)
    FINAL = (DONE, SKIPPED)
    """States in which a step is finished for good: its workflow may complete."""


DEAD_OUTCOMES: tuple[str, ...] = DEAD_REASONS
"""The ``workflow_steps.outcome`` of a ``dead`` step: the reason its job was dead-lettered,
one of the queue's :data:`reliable_queue.DEAD_REASONS` (the same tuple, not a copy), for
the layers that know no queue (a foreign writer's other reason is kept as it came)."""


class Workflow(Base):
    """One fan-out: a set of steps about one subject (for example an order).

    ``version`` is the optimistic-locking version column: every step
    transition updates this row, so two steps finishing at once conflict and
    the loser retries its unit of work.
    """

    __tablename__ = "workflows"
    __table_args__ = (
        Index("uq_workflows_kind_subject_id", "kind", "subject_id", unique=True),
        Index("ix_workflows_status", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(50))
    subject_id: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(String(20), default=WorkflowStatus.RUNNING)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    blocked_step: Mapped[str | None] = mapped_column(String(50))
    blocked_reason: Mapped[str | None] = mapped_column(Text)
    version: Mapped[int] = mapped_column(Integer, default=1)

    __mapper_args__ = {"version_id_col": version}


class WorkflowStep(Base):
    """One step of a workflow; also the outbox record of its queue message.

    ``queue``, ``task`` and ``payload`` are the message the relay publishes;
    the idempotency key is ``<workflow id>:<step>``. Completion is membership:
    the row's own status says done, unique per (workflow, step).

    ``compensates`` names the step whose effect this row undoes (a
    compensation, see ``workflows.compensation``); None for a forward step.

    ``priority`` and ``fairness_key`` go with its message (None: the queue's default
    priority, no key): written with the row, so every publish of it, a re-publish by the
    sweep included, carries them.

    ``publish_attempts`` counts failed publishes of this row (the queue refused
    it, not a queue that was down), ``next_publish_at`` holds the row back until
    its backoff has passed, ``publish_error`` is the last refusal's text.

    ``traceparent`` / ``tracestate`` are the W3C trace context of the workflow (its
    order's, say), written with the row in its writer's transaction and copied into
    the job record when the row is published (None: no trace; docs/adr/0036).
    """

    __tablename__ = "workflow_steps"
    __table_args__ = (
        Index("uq_workflow_steps_workflow_id_step", "workflow_id", "step", unique=True),
        Index("ix_workflow_steps_status", "status"),
        # searches by step and state (``orders search``, ``GET /api/v1/jobs``)
        Index("ix_workflow_steps_step_status", "step", "status"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    workflow_id: Mapped[int] = mapped_column(ForeignKey("workflows.id"))
    step: Mapped[str] = mapped_column(String(50))
    queue: Mapped[str] = mapped_column(String(100))
    task: Mapped[str] = mapped_column(String(100))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(20), default=StepStatus.PENDING)
    outcome: Mapped[str | None] = mapped_column(String(50))
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text)
    job_id: Mapped[str | None] = mapped_column(String(64))
    fencing_token: Mapped[int | None] = mapped_column(BigInteger)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    dispatched_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    started_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    finished_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    publish_attempts: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    next_publish_at: Mapped[datetime | None] = mapped_column(UTCDateTime())
    publish_error: Mapped[str | None] = mapped_column(Text)
    compensates: Mapped[str | None] = mapped_column(String(50))
    priority: Mapped[int | None] = mapped_column(Integer)
    fairness_key: Mapped[str | None] = mapped_column(String(128))
    traceparent: Mapped[str | None] = mapped_column(String(TRACEPARENT_CHARS))
    tracestate: Mapped[str | None] = mapped_column(String(MAX_TRACESTATE_CHARS))

    @property
    def idempotency_key(self) -> str:
        """The queue idempotency key of this step: ``<workflow id>:<step>``."""
        return idempotency_key(self.workflow_id, self.step)


class DatabaseIdentity(Base):
    """The one row naming this database: a random id created with the schema.

    A Redis namespace is bound to it, so two databases never share one queue
    namespace (their idempotency keys ``<workflow id>:<step>`` would collide).
    """

    __tablename__ = "database_identity"

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


def idempotency_key(workflow_id: int, step: str) -> str:
    """Return the idempotency key of one step message.

    Args:
        workflow_id: the workflow's id.
        step: the step name.

    Returns:
        ``f"{workflow_id}:{step}"``.
    """
    return f"{workflow_id}:{step}"
