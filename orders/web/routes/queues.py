"""A queue's page: jobs by state, its pause state, rate limit and per-customer cap with
the pause / resume, limit and cap actions, and "explain" for one job."""

from __future__ import annotations

from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from orders.app.audit import Action
from orders.domain.access import Permission
from orders.domain.steps import ALL_STEPS, task_name
from orders.web.audited import audit_now
from orders.web.lookup import full_job_id
from orders.web.params import BadParam, flag, integer, job_id, stored_job_id
from orders.web.render import page, shown_payload
from orders.web.state import web_state
from reliable_queue import Queue, QueueLimitError, explain, stats
from reliable_queue.inspection import ids_in
from reliable_queue.limits import MAX_KEY_CAP
from reliable_queue.pausing import MAX_REASON_CHARS
from reliable_queue.rate_limits import parse_spec

#: Who a pause made from the dashboard names (its sessions carry no user name).
DASHBOARD = "dashboard"

STATES = ("ready", "delayed", "active", "dead", "done")


def known_queue(request: Request) -> Queue:
    """The queue named in the path.

    Raises:
        BadParam(404): no such queue.
    """
    name = request.path_params["queue"]
    queue = web_state(request).app.queues.get(name)
    if queue is None:
        raise BadParam(f"no queue {name!r}; the queues are {', '.join(ALL_STEPS)}", 404)
    return queue


def jobs_by_state(queue: Queue, limit: int, notes: list[str] | None = None) -> dict[str, list[str]]:
    """Up to ``limit`` job ids per state: oldest first, except ``done`` (newest first);
    ``ready`` lists the plain ready list, then the jobs with a priority or a customer
    key in the order they are served (ADR 0033).

    A structure whose key holds another type shows no ids; its note goes to ``notes``.
    """
    out: dict[str, list[str]] = {}
    for kind in (*STATES, "waiting"):
        start, stop = (-limit, -1) if kind == "done" else (0, limit - 1)
        ids, problem = ids_in(queue, kind, start, stop)
        out[kind] = list(reversed(ids)) if kind == "done" else ids
        if problem and notes is not None:
            notes.append(problem)
    out["ready"] = (out["ready"] + out.pop("waiting"))[:limit]
    return out


def queue_page(request: Request) -> Response:
    """GET /queues/{queue}?limit=N : counts, counters and job ids in each state; a key of
    the wrong type is named in a note and the rest of the page is shown."""
    queue = known_queue(request)
    limit = integer(request.query_params, "limit", default=20, low=1, high=500)
    counts = stats(queue)
    notes: list[str] = []
    jobs = jobs_by_state(queue, limit, notes)
    notes = list(dict.fromkeys([*counts.corrupt.values(), *notes]))
    return page(
        request,
        "queue.html",
        {
            "queue": queue.name,
            "task": task_name(queue.name),
            "stats": counts,
            "jobs": jobs,
            "limit": limit,
            "notes": notes,
            "max_reason": MAX_REASON_CHARS,
        },
    )


async def pause_queue(request: Request) -> Response:
    """POST /queues/{queue}/pause (form: ``reason``, the CSRF token) : pause the queue,
    then back to its page (303). Token-protected like every action.

    Raises:
        Refused: no token configured, not signed in, cross-site, or a bad CSRF token.
        BadParam(400): a reason longer than ``MAX_REASON_CHARS`` characters.
    """
    queue = known_queue(request)
    form = await request.form()
    caller = web_state(request).guard.check_action(request, form, Permission.OPERATE)
    reason = str(form.get("reason") or "").strip()
    if len(reason) > MAX_REASON_CHARS:
        raise BadParam(f"a reason is at most {MAX_REASON_CHARS} characters, not {len(reason)}")
    await run_in_threadpool(queue.pause, reason=reason, by=DASHBOARD)
    await audit_now(
        request, caller, Action.PAUSE, {"steps": [queue.name], "reason": reason}, count=1
    )
    return RedirectResponse(f"/queues/{queue.name}", status_code=303)


async def resume_queue(request: Request) -> Response:
    """POST /queues/{queue}/resume (form: the CSRF token) : resume the queue, then back to
    its page (303).

    Raises:
        Refused: as for :func:`pause_queue`.
    """
    queue = known_queue(request)
    form = await request.form()
    caller = web_state(request).guard.check_action(request, form, Permission.OPERATE)
    was = await run_in_threadpool(queue.resume)
    await audit_now(request, caller, Action.RESUME, {"steps": [queue.name]}, count=int(was))
    return RedirectResponse(f"/queues/{queue.name}", status_code=303)


async def limit_queue(request: Request) -> Response:
    """POST /queues/{queue}/limit (form: ``limit`` as ``N/s``, ``N/m``, ``N/h`` or ``N/Ks``,
    or ``clear``; the CSRF token) : set, change or clear the queue's rate limit (ADR 0032),
    then back to its page (303). Token-protected like every action (operator role);
    leaves one ``limit`` audit row.

    Raises:
        Refused: no token configured, not signed in, cross-site, a bad CSRF token, or a
            role that may not operate.
        BadParam(400): a limit that does not parse (``0/s``, ``abc``), or neither a limit
            nor ``clear``.
    """
    queue = known_queue(request)
    form = await request.form()
    caller = web_state(request).guard.check_action(request, form, Permission.OPERATE)
    if form.get("clear"):
        was = await run_in_threadpool(queue.clear_limit)
        await audit_now(
            request, caller, Action.LIMIT, {"step": queue.name, "limit": None}, count=int(was)
        )
        return RedirectResponse(f"/queues/{queue.name}", status_code=303)
    spec = str(form.get("limit") or "").strip()
    if not spec:
        raise BadParam("give a limit (N/s, N/m, N/h or N/Ks) or clear it")
    try:
        rate = parse_spec(spec[:40])
    except QueueLimitError as exc:
        raise BadParam(str(exc)) from None
    await run_in_threadpool(queue.set_limit, rate.n, rate.per_ms / 1000.0)
    await audit_now(
        request, caller, Action.LIMIT, {"step": queue.name, "limit": rate.text()}, count=1
    )
    return RedirectResponse(f"/queues/{queue.name}", status_code=303)


async def cap_queue(request: Request) -> Response:
    """POST /queues/{queue}/cap (form: ``cap``, a whole number 1..100000, or ``clear``;
    the CSRF token) : set, change or clear the per-customer cap (ADR 0033), then back to
    its page (303). Token-protected like every action (operator role); leaves one
    ``cap`` audit row.

    Raises:
        Refused: no token configured, not signed in, cross-site, a bad CSRF token, or a
            role that may not operate.
        BadParam(400): a cap that is not a whole number in range, or neither a cap nor
            ``clear``.
    """
    queue = known_queue(request)
    form = await request.form()
    caller = web_state(request).guard.check_action(request, form, Permission.OPERATE)
    if form.get("clear"):
        was = await run_in_threadpool(queue.clear_key_cap)
        await audit_now(
            request, caller, Action.CAP, {"step": queue.name, "cap": None}, count=int(was)
        )
        return RedirectResponse(f"/queues/{queue.name}", status_code=303)
    raw = str(form.get("cap") or "").strip()
    if not (raw.isascii() and raw.isdigit() and 1 <= int(raw[:7]) <= MAX_KEY_CAP):
        raise BadParam(f"a cap is a whole number 1..{MAX_KEY_CAP}, not {raw[:40]!r}")
    await run_in_threadpool(queue.set_key_cap, int(raw))
    await audit_now(request, caller, Action.CAP, {"step": queue.name, "cap": int(raw)}, count=1)
    return RedirectResponse(f"/queues/{queue.name}", status_code=303)


def job_path(queue: str, job: str) -> str:
    """The explain page of ``job`` in ``queue`` (the id percent-encoded).

    Args:
        queue: a queue name.
        job: a job id as stored.

    Returns:
        ``/queues/<queue>/jobs/<id>``.
    """
    return f"/queues/{queue}/jobs/{quote(job, safe='')}"


def explain_lookup(request: Request) -> Response:
    """GET /queues/{queue}/jobs?id=JOB : redirect to that job's page (400 if malformed).

    JOB is an id or a unique prefix of 6+ characters; the page resolves it.
    """
    queue = known_queue(request)
    job = job_id(request.query_params.get("id"))
    return RedirectResponse(job_path(queue.name, job), status_code=303)


def explain_page(request: Request) -> Response:
    """GET /queues/{queue}/jobs/{job_id} : everything Redis knows about one job.

    A unique prefix of 6+ characters of a job id in this queue (as ``orders
    status`` shows) redirects to the full id's page; an ambiguous one lists the
    candidates (400). The payload is cut after a few KB unless ``?full=1``.
    """
    queue = known_queue(request)
    job = stored_job_id(request.path_params["job_id"])
    found = explain(queue, job)
    if found is None:
        missing = f"queue {queue.name} has no trace of job {job!r}"
        full = full_job_id(
            queue, job, dead_only=False, missing=missing, link=lambda j: job_path(queue.name, j)
        )
        if full is None:  # the exact id matched, then expired before this read
            raise BadParam(missing, 404)
        return RedirectResponse(job_path(queue.name, full), status_code=303)
    order_id = found.payload.get("order_id") if isinstance(found.payload, dict) else None
    payload = shown_payload(found.payload, full=flag(request.query_params, "full"))
    return page(
        request,
        "job.html",
        {"queue": queue.name, "job": found, "order_id": order_id, "payload": payload},
    )


routes = [
    Route("/queues/{queue}", queue_page, methods=["GET"]),
    Route("/queues/{queue}/pause", pause_queue, methods=["POST"]),
    Route("/queues/{queue}/resume", resume_queue, methods=["POST"]),
    Route("/queues/{queue}/limit", limit_queue, methods=["POST"]),
    Route("/queues/{queue}/cap", cap_queue, methods=["POST"]),
    Route("/queues/{queue}/jobs", explain_lookup, methods=["GET"]),
    Route("/queues/{queue}/jobs/{job_id:job_id}", explain_page, methods=["GET"]),
]
