"""The dead-letter queues: filter, show one, redrive (with a dry run), purge (confirmed).

Actions act on explicit job ids (``scope=selected``) or on everything that
matches the filters (``scope=matching``). A purge is done only when the form
says ``confirm=yes``, which only the confirmation page sends; that page lists
the ids it will delete, so entries arriving meanwhile are not deleted unseen.

Job ids are taken as stored, whatever their characters (a foreign producer's
ids included): a selected id that names no dead letter is listed on the result
page and the others are still acted on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from orders.app.audit import Action
from orders.app.dead_letters import BlockingLetter, blocking_letters
from orders.domain.access import Permission
from orders.domain.steps import ALL_STEPS, TASKS
from orders.web.audited import audit_now
from orders.web.lookup import full_job_id
from orders.web.params import BadParam, flag, integer, job_ids, one_of, stored_job_id
from orders.web.render import page, shown_payload
from orders.web.state import WebState, web_state
from reliable_queue import DEAD_REASONS, DeadLetter, Queue, QueueDataError


@dataclass(frozen=True)
class Filters:
    """Which dead letters a page or an action is about (None: any)."""

    queue: str | None = None
    task: str | None = None
    reason: str | None = None

    def query(self) -> dict[str, str]:
        """The non-empty filters, for links and hidden form fields."""
        return {k: v for k, v in self.__dict__.items() if v}


def parse_filters(params: Mapping[str, Any]) -> Filters:
    """Filters from query or form parameters.

    Raises:
        BadParam: an unknown queue, task or reason.
    """
    return Filters(
        queue=one_of(params, "queue", ALL_STEPS),
        task=one_of(params, "task", TASKS),
        reason=one_of(params, "reason", DEAD_REASONS),
    )


def chosen_queues(state: WebState, filters: Filters) -> list[Queue]:
    """The queues the filters allow."""
    names = [filters.queue] if filters.queue else list(ALL_STEPS)
    return [state.app.queues[n] for n in names]


def list_letters(
    state: WebState, filters: Filters, limit: int, notes: list[str] | None = None
) -> list[DeadLetter]:
    """Up to ``limit`` matching dead letters, oldest first within each queue; a queue
    whose DLQ key holds another type is left out and named in ``notes``."""
    out: list[DeadLetter] = []
    for queue in chosen_queues(state, filters):
        if len(out) >= limit:
            break
        try:
            out.extend(
                queue.dead_letters.iter(
                    task=filters.task, reason=filters.reason, limit=limit - len(out)
                )
            )
        except QueueDataError as exc:
            if notes is not None:
                notes.append(f"queue {queue.name}: {exc}")
    return out


def _size(queue: Queue) -> int | str:
    """The DLQ's size, or ``?`` when its key holds another type (the page's notes say so)."""
    try:
        return queue.dead_letters.size()
    except QueueDataError:
        return "?"


def dlq_page(request: Request) -> Response:
    """GET /dlq?queue=&task=&reason=&limit= : the matching dead letters."""
    state = web_state(request)
    filters = parse_filters(request.query_params)
    limit = integer(request.query_params, "limit", default=100, low=1, high=1000)
    sizes = {q.name: _size(q) for q in state.app.queues.values()}
    notes: list[str] = []
    letters = list_letters(state, filters, limit, notes)
    return page(
        request,
        "dlq.html",
        {
            "filters": filters,
            "letters": letters,
            "limit": limit,
            "sizes": sizes,
            "tasks": TASKS,
            "reasons": DEAD_REASONS,
            "notes": notes,
        },
    )


def letter_path(queue: str, job: str) -> str:
    """The page of dead letter ``job`` in ``queue`` (the id percent-encoded).

    Args:
        queue: a queue name.
        job: a job id as stored.

    Returns:
        ``/dlq/<queue>/<id>``.
    """
    return f"/dlq/{queue}/{quote(job, safe='')}"


def letter_page(request: Request) -> Response:
    """GET /dlq/{queue}/{job_id} : one dead letter in full.

    A unique prefix of 6+ characters of a dead letter's id in this queue
    redirects to its full id's page; an ambiguous one lists the candidates (400).
    The payload is cut after a few KB unless ``?full=1``.
    """
    state = web_state(request)
    name = request.path_params["queue"]
    if name not in state.app.queues:
        raise BadParam(f"no queue {name!r}; the queues are {', '.join(ALL_STEPS)}", 404)
    job = stored_job_id(request.path_params["job_id"])
    queue = state.app.queues[name]
    letter = queue.dead_letters.show(job)
    if letter is None:
        missing = f"job {job!r} is not in the dead-letter queue of {name}"
        full = full_job_id(
            queue, job, dead_only=True, missing=missing, link=lambda j: letter_path(name, j)
        )
        if full is None:  # the exact id matched, then left the DLQ before this read
            raise BadParam(missing, 404)
        return RedirectResponse(letter_path(name, full), status_code=303)
    payload = shown_payload(letter.payload, full=flag(request.query_params, "full"))
    order_id = letter.payload.get("order_id") if isinstance(letter.payload, dict) else None
    return page(
        request, "dead_letter.html", {"letter": letter, "payload": payload, "order_id": order_id}
    )


@dataclass
class Target:
    """What an action acts on: per queue, explicit ids or the filters."""

    filters: Filters
    ids: list[str] | None


def parse_target(form: Mapping[str, Any], ids: list[str]) -> Target:
    """Read ``scope``, the filters and the ids of an action form.

    Raises:
        BadParam: unknown scope, bad filters, or ``selected`` with no id.
    """
    scope = one_of(form, "scope", ("selected", "matching")) or "selected"
    filters = parse_filters(form)
    if scope == "selected":
        if not ids:
            raise BadParam("select at least one dead letter (or act on everything matching)")
        return Target(filters, ids)
    return Target(filters, None)


@dataclass
class Resolved:
    """The dead letters an action found, and the selected ids it did not.

    Attributes:
        per_queue: queue name -> ids in its DLQ now.
        missing: selected ids in none of the chosen queues' DLQs (gone,
            mistyped or in another queue), each reported on its own.
        notes: queues left out because a key of theirs holds another type.
    """

    per_queue: dict[str, list[str]]
    missing: list[str]
    notes: list[str] = field(default_factory=list)


def resolve(state: WebState, target: Target) -> Resolved:
    """The ids of ``target`` that are in a chosen queue's DLQ now, and those that are not.

    Args:
        state: the dashboard's state (its queues).
        target: the filters and, for ``scope=selected``, the ids (looked up exactly).

    Returns:
        The found ids by queue and the selected ids found nowhere.

    Raises:
        QueueConnectionError: Redis unreachable.
    """
    out: dict[str, list[str]] = {}
    notes: list[str] = []
    for queue in chosen_queues(state, target.filters):
        try:
            if target.ids is None:
                found = [
                    d.job_id
                    for d in queue.dead_letters.iter(
                        task=target.filters.task, reason=target.filters.reason
                    )
                ]
            else:
                found = [i for i in target.ids if queue.dead_letters.show(i) is not None]
        except QueueDataError as exc:
            notes.append(f"queue {queue.name}: {exc}")
            continue
        if found:
            out[queue.name] = found
    seen = {i for ids in out.values() for i in ids}
    missing = [i for i in target.ids or () if i not in seen]
    return Resolved(out, missing, notes)


def _redrive(state: WebState, target: Target, dry_run: bool) -> dict[str, Any]:
    redriven: dict[str, list[str]] = {}
    skipped: list[str] = []
    unrunnable: list[str] = []
    found = resolve(state, target)
    notes = list(found.notes)
    for name, ids in found.per_queue.items():
        try:
            report = state.app.queues[name].dead_letters.redrive(ids=ids, dry_run=dry_run)
        except QueueDataError as exc:  # nothing of this queue was redriven
            notes.append(f"queue {name}: {exc}")
            continue
        redriven[name] = report.redriven
        skipped.extend(report.skipped)
        unrunnable.extend(report.unrunnable)
    return {
        "redriven": redriven,
        "skipped": skipped,
        "unrunnable": unrunnable,
        "dry_run": dry_run,
        "not_found": found.missing,
        "notes": notes,
    }


async def redrive(request: Request) -> Response:
    """POST /dlq/redrive : replay dead letters (``dry_run=1`` only lists them)."""
    state = web_state(request)
    form = await request.form()
    caller = state.guard.check_action(request, form, Permission.OPERATE)
    target = parse_target(form, job_ids(form.getlist("ids")))
    dry_run = flag(form, "dry_run")
    result = await run_in_threadpool(_redrive, state, target, dry_run)
    result["count"] = sum(len(v) for v in result["redriven"].values())
    await audit_now(
        request,
        caller,
        Action.REDRIVE,
        {**target.filters.query(), "job_ids": [j for v in result["redriven"].values() for j in v]},
        count=result["count"],
        dry_run=dry_run,
        result=f"failed: {'; '.join(result['notes'])}" if result["notes"] else "ok",
    )
    return page(request, "redrive.html", result)


def _split_blocking(
    state: WebState, per_queue: dict[str, list[str]]
) -> tuple[dict[str, list[str]], list[BlockingLetter]]:
    """Drop from ``per_queue`` the dead letters whose step blocks an order (purging
    one would leave its order blocked with nothing to redrive); return what is left
    and the dropped ones."""
    letters = [
        letter
        for name, ids in per_queue.items()
        for i in ids
        if (letter := state.app.queues[name].dead_letters.show(i)) is not None
    ]
    blocking = blocking_letters(state.app.session_factory, letters)
    held = {b.job_id for b in blocking}
    free = {n: [i for i in ids if i not in held] for n, ids in per_queue.items()}
    return {n: ids for n, ids in free.items() if ids}, blocking


def _purge(
    state: WebState, per_queue: dict[str, list[str]], notes: list[str]
) -> tuple[int, list[BlockingLetter]]:
    free, blocking = _split_blocking(state, per_queue)
    removed = 0
    for name, ids in free.items():
        try:
            removed += state.app.queues[name].dead_letters.purge(ids=ids)
        except QueueDataError as exc:  # nothing of this queue was purged
            notes.append(f"queue {name}: {exc}")
    return removed, blocking


async def purge(request: Request) -> Response:
    """POST /dlq/purge : without ``confirm=yes`` show what would be deleted and ask;
    with it, delete those dead letters for good. Dead letters whose step blocks an
    order are never purged here (they are listed with the way out: redrive the
    letter, or cancel the order); ``orders dlq purge --force`` can."""
    state = web_state(request)
    form = await request.form()
    caller = state.guard.check_action(request, form, Permission.ADMINISTER)
    target = parse_target(form, job_ids(form.getlist("ids")))
    found = await run_in_threadpool(resolve, state, target)
    confirmed = one_of(form, "confirm", ("yes",)) == "yes"
    if not confirmed:
        free, blocking = await run_in_threadpool(_split_blocking, state, found.per_queue)
        return page(
            request,
            "purge_confirm.html",
            {
                "per_queue": free,
                "count": sum(len(v) for v in free.values()),
                "blocking": blocking,
                "not_found": found.missing,
                "notes": found.notes,
            },
        )
    notes = list(found.notes)
    removed, blocking = await run_in_threadpool(_purge, state, found.per_queue, notes)
    held = {b.job_id for b in blocking}
    await audit_now(
        request,
        caller,
        Action.PURGE,
        {
            **target.filters.query(),
            "job_ids": [i for ids in found.per_queue.values() for i in ids if i not in held],
        },
        count=removed,
        result=f"failed: {'; '.join(notes)}" if notes else "ok",
    )
    return page(
        request,
        "purge_done.html",
        {"removed": removed, "blocking": blocking, "not_found": found.missing, "notes": notes},
    )


routes = [
    Route("/dlq", dlq_page, methods=["GET"]),
    Route("/dlq/redrive", redrive, methods=["POST"]),
    Route("/dlq/purge", purge, methods=["POST"]),
    Route("/dlq/{queue}/{job_id:job_id}", letter_page, methods=["GET"]),
]
