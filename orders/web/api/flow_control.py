"""``/api/v1/queues``: the step queues' flow control over HTTP, as ``orders queue pause``,
``resume``, ``limit`` and ``cap`` do it (ADR 0031-0033): read by any role that reads,
changed by an operator, each change leaving its audit row (ADR 0040) right after the
queue acted. Bodies and answers are the models below, so the OpenAPI document shows them.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Path, Request
from pydantic import BaseModel, ConfigDict, Field, model_validator
from starlette.concurrency import run_in_threadpool

from orders.app.audit import Action, record_now
from orders.app.tokens import Caller
from orders.domain.access import Permission
from orders.domain.steps import ALL_STEPS
from orders.web.api.content import json_if_any
from orders.web.api.problems import ApiProblem, responses
from orders.web.api.routes import actor, api_state, needs
from reliable_queue import Queue, QueueLimitError, stats
from reliable_queue.errors import InvalidTextError
from reliable_queue.inspection import QueueStats
from reliable_queue.limits import MAX_KEY_CAP
from reliable_queue.pausing import MAX_BY_CHARS, MAX_REASON_CHARS
from reliable_queue.rate_limits import parse_spec

MAX_SPEC_CHARS = 40
"""Longest rate-limit text read (``1000000/3600s`` is 13)."""


class PauseIn(BaseModel):
    """The optional body of a pause."""

    model_config = ConfigDict(extra="forbid", strict=True)

    reason: str | None = Field(
        default=None,
        max_length=MAX_REASON_CHARS,
        description=f"Why (shown by status, watch and the dashboard; at most"
        f" {MAX_REASON_CHARS} characters).",
    )


class LimitIn(BaseModel):
    """Set a rate limit (``limit``) or remove it (``clear``): one of the two."""

    model_config = ConfigDict(extra="forbid", strict=True)

    limit: str | None = Field(
        default=None,
        max_length=MAX_SPEC_CHARS,
        description="N/s, N/m, N/h or N/Ks: at most N job starts per interval, across"
        " every worker (e.g. 200/s, 1/2s).",
    )
    clear: bool = Field(default=False, description="Remove the queue's limit.")

    @model_validator(mode="after")
    def _one_of_two(self) -> LimitIn:
        if (self.limit is None) == (not self.clear):
            raise ValueError("give a limit or clear: true, not both or neither")
        return self


class CapIn(BaseModel):
    """Set the per-customer cap (``cap``) or remove it (``clear``): one of the two."""

    model_config = ConfigDict(extra="forbid", strict=True)

    cap: int | None = Field(
        default=None,
        ge=1,
        le=MAX_KEY_CAP,
        description=f"At most this many jobs of one customer leased at once (1..{MAX_KEY_CAP}).",
    )
    clear: bool = Field(default=False, description="Remove the queue's cap.")

    @model_validator(mode="after")
    def _one_of_two(self) -> CapIn:
        if (self.cap is None) == (not self.clear):
            raise ValueError("give a cap or clear: true, not both or neither")
        return self


class PausedOut(BaseModel):
    """Who paused a queue, why and since when (texts as stored: untrusted)."""

    since: datetime | None = Field(description="When the pause began (UTC; null: unreadable).")
    by: str
    reason: str


class LimitOut(BaseModel):
    """A queue's rate limit."""

    n: int = Field(description="Most job starts per window.")
    per_seconds: float = Field(description="The window, seconds.")
    text: str = Field(description="As `orders queue limit` takes it, e.g. 200/s.")


class DepthOut(BaseModel):
    """Jobs in each structure of a queue now."""

    ready: int = Field(description="Waiting to start (plain and prioritized).")
    delayed: int
    active: int
    dead: int


class QueueOut(BaseModel):
    """The flow-control state of one step's queue."""

    name: str
    paused: PausedOut | None = Field(description="null: not paused.")
    limit: LimitOut | None = Field(description="null: no rate limit.")
    cap: int | None = Field(description="Per-customer cap; null: none.")
    depth: DepthOut


class QueuesOut(BaseModel):
    """Every step's queue, in step order."""

    items: list[QueueOut]


class QueueActionOut(BaseModel):
    """A flow-control action's result: whether it changed anything, and the state now."""

    changed: bool = Field(
        description="False when there was nothing to do (resuming a queue that was not"
        " paused, clearing a limit or cap that was not set)."
    )
    queue: QueueOut


def queue_out(found: QueueStats) -> dict[str, Any]:
    """The JSON of one queue's state (:class:`QueueOut`) from its stats."""
    paused = None
    if found.paused is not None:
        since = found.paused.since
        paused = {
            "since": None if since is None else datetime.fromtimestamp(since, UTC).isoformat(),
            "by": found.paused.by,
            "reason": found.paused.reason,
        }
    rate = found.rate_limit
    return {
        "name": found.queue,
        "paused": paused,
        "limit": None if rate is None else {**rate.as_dict(), "text": rate.text()},
        "cap": found.key_cap,
        "depth": {k: getattr(found, k) for k in ("ready", "delayed", "active", "dead")},
    }


StepName = Annotated[
    str, Path(max_length=40, description=f"A step's queue: {', '.join(ALL_STEPS)}.")
]

router = APIRouter(prefix="/api/v1", responses=responses())


def _queue(request: Request, step: str) -> Queue:
    queue = api_state(request).web.app.queues.get(step)
    if queue is None:
        raise ApiProblem(
            404, f"no queue {step!r}; the queues are {', '.join(ALL_STEPS)}", field="step"
        )
    return queue


async def _acted(
    request: Request,
    caller: Caller,
    queue: Queue,
    action: str,
    target: dict[str, Any],
    changed: bool,
) -> dict[str, Any]:
    """Write the action's audit row (after the queue acted), then answer its state."""
    app = api_state(request).web.app
    who = actor(request, caller)
    await run_in_threadpool(
        record_now, app.session_factory, who, action, target, count=int(changed)
    )
    return {"changed": changed, "queue": queue_out(await run_in_threadpool(stats, queue))}


@router.get("/queues", response_model=QueuesOut, summary="Flow-control state of every queue")
def list_queues(
    request: Request, caller: Annotated[Caller, needs(Permission.READ)]
) -> dict[str, Any]:
    """Each step's queue: paused (who, why, since), rate limit, per-customer cap, depth."""
    queues = api_state(request).web.app.queues
    return {"items": [queue_out(stats(queues[s])) for s in ALL_STEPS if s in queues]}


@router.post("/queues/{step}/pause", response_model=QueueActionOut, summary="Pause a queue")
async def pause_queue(
    request: Request,
    step: StepName,
    caller: Annotated[Caller, needs(Permission.OPERATE)],
    _json: Annotated[None, Depends(json_if_any)],
    body: Annotated[PauseIn | None, Body()] = None,
) -> dict[str, Any]:
    """Pause the queue (as ``orders queue pause``): from the answer on no worker starts a
    job of it; running jobs finish. The pause names the token. One audit row."""
    queue = _queue(request, step)
    reason = (body.reason if body else None) or ""
    try:
        await run_in_threadpool(queue.pause, reason=reason, by=caller.name[:MAX_BY_CHARS])
    except (QueueLimitError, InvalidTextError) as exc:  # text UTF-8 cannot encode
        raise ApiProblem(422, str(exc), field="reason") from None
    target = {"steps": [step], "reason": reason or None}
    return await _acted(request, caller, queue, Action.PAUSE, target, True)


@router.post("/queues/{step}/resume", response_model=QueueActionOut, summary="Resume a queue")
async def resume_queue(
    request: Request, step: StepName, caller: Annotated[Caller, needs(Permission.OPERATE)]
) -> dict[str, Any]:
    """Resume the queue (as ``orders queue resume``); ``changed`` is false when it was not
    paused. One audit row."""
    queue = _queue(request, step)
    was = await run_in_threadpool(queue.resume)
    return await _acted(request, caller, queue, Action.RESUME, {"steps": [step]}, bool(was))


@router.post(
    "/queues/{step}/limit", response_model=QueueActionOut, summary="Set or clear a rate limit"
)
async def limit_queue(
    request: Request,
    step: StepName,
    body: LimitIn,
    caller: Annotated[Caller, needs(Permission.OPERATE)],
    _json: Annotated[None, Depends(json_if_any)],
) -> dict[str, Any]:
    """Set, change (``{"limit": "200/s"}``) or remove (``{"clear": true}``) the queue's
    rate limit (as ``orders queue limit``); it applies from the next fetch. A limit that
    does not parse (``0/s``, ``abc``) is 422 and changes nothing. One audit row."""
    queue = _queue(request, step)
    if body.limit is None:
        was = await run_in_threadpool(queue.clear_limit)
        target = {"step": step, "limit": None}
        return await _acted(request, caller, queue, Action.LIMIT, target, bool(was))
    try:
        rate = parse_spec(body.limit)
    except QueueLimitError as exc:
        raise ApiProblem(422, str(exc), field="limit") from None
    await run_in_threadpool(queue.set_limit, rate.n, rate.per_ms / 1000.0)
    target = {"step": step, "limit": rate.text()}
    return await _acted(request, caller, queue, Action.LIMIT, target, True)


@router.post(
    "/queues/{step}/cap", response_model=QueueActionOut, summary="Set or clear a per-customer cap"
)
async def cap_queue(
    request: Request,
    step: StepName,
    body: CapIn,
    caller: Annotated[Caller, needs(Permission.OPERATE)],
    _json: Annotated[None, Depends(json_if_any)],
) -> dict[str, Any]:
    """Set, change (``{"cap": 2}``) or remove (``{"clear": true}``) the per-customer cap
    (as ``orders queue cap``); it applies from the next fetch. One audit row."""
    queue = _queue(request, step)
    target: dict[str, Any] = {"step": step, "cap": body.cap}
    if body.cap is None:
        was = await run_in_threadpool(queue.clear_key_cap)
        return await _acted(request, caller, queue, Action.CAP, target, bool(was))
    await run_in_threadpool(queue.set_key_cap, body.cap)
    return await _acted(request, caller, queue, Action.CAP, target, True)
