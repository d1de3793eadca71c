"""``orders dlq``: list, show, redrive and purge dead-lettered step jobs."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from orders.app.bootstrap import App
from orders.app.dead_letters import BlockingLetter, blocking_letters, ways_out
from orders.app.previews import PAYLOAD_SHOWN, preview
from orders.cli.context import audit_row, emit_json, fail, handle_errors, make_app
from orders.cli.options import number_option
from orders.cli.render import console, fields, fitted_table, say, short_ids, warn, when
from orders.domain.steps import ALL_STEPS, TASKS
from reliable_queue import (
    DEAD_REASONS,
    DeadLetter,
    JobIdNotFoundError,
    JobIdTooShortError,
    Queue,
    QueueDataError,
    find_job,
)
from reliable_queue.lookup import MIN_PREFIX

dlq = typer.Typer(
    help="Dead-letter queues of the step queues: list, show, redrive, purge.", no_args_is_help=True
)

StepOpt = Annotated[str | None, typer.Option("--step", help="Only this step's queue.")]
KNOWN_TASKS = TASKS
"""Task names the step queues carry (``--task`` accepts only these)."""
TaskOpt = Annotated[
    str | None,
    typer.Option(
        "--task",
        help=f"Only this task name: {', '.join(KNOWN_TASKS)}. (Jobs of other task names "
        "are dead-lettered as unknown_task: select them with --reason unknown_task.)",
    ),
]
ReasonOpt = Annotated[
    str | None, typer.Option("--reason", help=f"Only this reason: {', '.join(DEAD_REASONS)}.")
]
IdsArg = Annotated[
    list[str] | None,
    typer.Argument(
        help="Job ids or unique prefixes (6+ characters) from `orders dlq list` "
        "(default: all matching)."
    ),
]
MAX_RATE = 10_000.0  # jobs per second a redrive may be paced at
UNREADABLE_ID = (
    "not UTF-8 text: shown as hex:<its bytes>, which every command taking a job id "
    "accepts; no worker can run it (a redrive leaves it), purge it by this id"
)


def _app_queues(step: str | None) -> tuple[App, list[Queue]]:
    """The app (the caller closes it) and the step queues ``--step`` names (all: None)."""
    if step is not None and step not in ALL_STEPS:
        fail(f"unknown step {step!r}; choose from {', '.join(ALL_STEPS)}", code=2)
    app = make_app()
    return app, [app.queues[s] for s in ([step] if step else ALL_STEPS)]


def _check_filters(task: str | None, reason: str | None) -> None:
    """Exit 2 when ``--task`` or ``--reason`` names nothing a dead letter can carry."""
    if task is not None and task not in KNOWN_TASKS:
        fail(
            f"unknown task {task!r}; choose from {', '.join(KNOWN_TASKS)} (dead letters of "
            "other task names: --reason unknown_task)",
            code=2,
        )
    if reason is not None and reason not in DEAD_REASONS:
        fail(f"unknown reason {reason!r}; choose from {', '.join(DEAD_REASONS)}", code=2)


def _check_ids_or_filters(job_ids: list[str] | None, task: str | None, reason: str | None) -> None:
    """Exit 2 when job ids come with ``--task`` / ``--reason``: the ids alone would decide,
    and a filter that is silently not applied acts on letters the user did not mean."""
    if job_ids and (task is not None or reason is not None):
        fail("give job ids or --task / --reason filters, not both (--step may narrow ids)", code=2)


def _resolve(queues: list[Queue], job_ids: list[str] | None) -> dict[str, list[str]]:
    """Queue name -> full ids of the dead letters the ids or prefixes name.

    Exits 2 (nothing done) when one of them is a prefix shorter than ``MIN_PREFIX``
    characters that is no whole id, 1 when one names no dead letter or several.
    """
    chosen: dict[str, list[str]] = {}
    missing: list[str] = []
    short: list[str] = []
    for given in job_ids or []:
        try:
            match = find_job(queues, given, dead_only=True)
        except JobIdTooShortError:
            short.append(given)
            continue
        except JobIdNotFoundError:
            missing.append(given)
            continue
        ids = chosen.setdefault(match.queue.name, [])
        if match.job_id not in ids:  # the same job named twice (or by id and prefix) is one
            ids.append(match.job_id)
    if short:
        fail(
            f"job id prefix(es) too short: {', '.join(map(repr, short))}; give at least "
            f"{MIN_PREFIX} characters (or the whole id); nothing was changed",
            code=2,
        )
    if missing:
        fail(f"not in any dead-letter queue: {', '.join(missing)}; nothing was changed")
    return chosen


@dlq.command("list")
@handle_errors
def list_(
    step: StepOpt = None,
    task: TaskOpt = None,
    reason: ReasonOpt = None,
    limit: Annotated[int, typer.Option(min=1, max=10_000, help="Most entries per queue.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """List dead letters, oldest first (across every queue shown; --limit applies per queue).

    Job ids are shortened to a unique prefix (any command taking a job id accepts
    it); `--json` shows them whole.
    """
    _check_filters(task, reason)
    letters: list[DeadLetter] = []
    unread: list[str] = []
    held = 0  # dead letters in the queues shown, filters aside
    app, queues = _app_queues(step)
    try:
        for queue in queues:
            try:
                letters.extend(queue.dead_letters.iter(task=task, reason=reason, limit=limit))
                held += queue.dead_letters.size()
            except QueueDataError as exc:  # this queue's DLQ key holds another type
                unread.append(f"queue {queue.name}: {exc}")
        letters.sort(key=lambda d: d.dead_at)  # across queues too, as the help promises
        warn(unread)
        if as_json:
            emit_json([d.as_dict() for d in letters])
            return
        short = short_ids(d.job_id for d in letters)
        rows = [
            [short[d.job_id], d.queue, d.reason, when(d.dead_at, date=False), d.error]
            for d in letters
        ]
        headers = ["job id", "queue", "reason", "dead (UTC)", "error"]
        title = f"dead letters ({len(letters)})"
        if held > len(letters):  # a --limit, or the filters, left some out
            title = f"dead letters ({len(letters)} shown of {held})"
        # ids are never cut: on a narrow terminal the time, then the queue give way
        console.print(fitted_table(headers, rows, flex=4, title=title, keep=(0,), drop=(3, 1)))
        if letters:
            say(
                "show one: orders dlq show JOB_ID (the id shown; any unique prefix works)",
                style="dim",
            )
        raw = [d.job_id for d in letters if d.id_unreadable]
        if raw:
            say(
                "{} dead letter(s) have an id that is not UTF-8 text, shown as hex:<its bytes>; "
                "no worker can run them: purge them by that id ({})",
                len(raw),
                f"orders dlq purge {raw[0]}",
                style="dim",
            )
    finally:
        app.close()


@dlq.command()
@handle_errors
def show(
    job_id: Annotated[
        str, typer.Argument(help="A job id, or a unique prefix (6+ characters), from `dlq list`.")
    ],
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
    full: Annotated[
        bool,
        typer.Option(
            "--full",
            help=f"Show the payload whole (by default its first {PAYLOAD_SHOWN} bytes).",
        ),
    ] = False,
) -> None:
    """Show one dead letter: payload, reason, error, traceback.

    A payload (or an unreadable record) longer than a few KB is cut, with a note
    saying how much is left out; --full or --json shows it whole.
    """
    app, queues = _app_queues(None)
    try:
        match = find_job(queues, job_id, dead_only=True)
        letter = match.queue.dead_letters.show(match.job_id)
        if letter is None:
            fail(f"no dead letter with id {match.job_id!r}")
            return
        if as_json:
            emit_json(letter.as_dict())
            return
        values: dict[str, Any] = letter.as_dict()
        if values.get("record_missing"):
            values["record"] = "gone (only the failure info is left)"
        if values.get("id_unreadable"):
            values["id"] = UNREADABLE_ID
        if not full:
            _cut_large(values)
        fields(values, skip=("record_missing", "id_unreadable"))
    finally:
        app.close()


def _cut_large(values: dict[str, Any]) -> None:
    """Replace a payload or raw record longer than ``PAYLOAD_SHOWN`` bytes by its first
    part (the payload as indented JSON) and a note on how to see it all."""
    payload = values.get("payload")
    texts = ("payload", "raw_record")
    if payload is not None and not isinstance(payload, str):
        shown = preview(json.dumps(payload, indent=2, default=str, ensure_ascii=False))
        if shown.more:
            values["payload"] = shown.text + _more(shown.more)
        texts = ("raw_record",)  # the payload's cut text is not cut a second time
    for key in texts:
        value = values.get(key)
        if isinstance(value, str) and (shown := preview(value)).more:
            values[key] = shown.text + _more(shown.more)


def _more(left_out: int) -> str:
    return f"\n... ({left_out} bytes more; use --json or --full to see all)"


@dlq.command()
@handle_errors
def redrive(
    job_ids: IdsArg = None,
    step: StepOpt = None,
    task: TaskOpt = None,
    reason: ReasonOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only list what would be replayed.")
    ] = False,
    rate: Annotated[
        float | None,
        number_option(min=0.1, max=MAX_RATE, help="At most this many jobs per second."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Replay dead letters (each runs again with a fresh attempt count): the ones given
    by id, or every one matching the filters."""
    _check_filters(task, reason)
    _check_ids_or_filters(job_ids, task, reason)
    app, queues = _app_queues(step)
    try:
        chosen = _resolve(queues, job_ids)
        replayed: list[tuple[str, str]] = []
        skipped: list[str] = []
        unrunnable: list[str] = []
        failed: list[str] = []
        for queue in queues:
            ids = chosen.get(queue.name)
            if job_ids and not ids:
                continue
            try:
                report = queue.dead_letters.redrive(
                    ids=ids, task=task, reason=reason, dry_run=dry_run, rate=rate
                )
            except QueueDataError as exc:  # a key of this queue holds another type
                failed.append(f"queue {queue.name}: {exc}")
                continue
            replayed.extend((queue.name, j) for j in report.redriven)
            skipped.extend(report.skipped)
            unrunnable.extend(report.unrunnable)
        audit_row(
            app,
            "redrive",
            {"step": step, "task": task, "reason": reason, "job_ids": [j for _, j in replayed]},
            count=len(replayed),
            dry_run=dry_run,
            result=f"failed: {'; '.join(failed)}" if failed else "ok",
        )
        if as_json:
            key = "would_redrive" if dry_run else "redriven"
            emit_json(
                {
                    key: [j for _, j in replayed],
                    "skipped": skipped,
                    "unrunnable": unrunnable,
                    "failed": failed,
                    "dry_run": dry_run,
                }
            )
            _exit_if(failed)
            return
        if dry_run:
            say("would redrive {} job(s):", len(replayed))
            for queue_name, job_id in replayed:
                say("  {}  {}", job_id, queue_name)
        else:
            say("redrove {} job(s)", len(replayed))
        if skipped:
            say("skipped {} (record gone or no longer dead): {}", len(skipped), ", ".join(skipped))
        for job_id in unrunnable:
            say(
                "left {}: its id is not UTF-8 text (or too long), no worker can run it; "
                "purge it: orders dlq purge {}",
                job_id,
                job_id,
            )
        _exit_if(failed)
    finally:
        app.close()


def _exit_if(failed: list[str]) -> None:
    """Exit 1 naming the queues where nothing was done (their keys could not be used)."""
    if failed:
        fail(f"nothing done on {len(failed)} queue(s): {'; '.join(failed)}")


@dlq.command()
@handle_errors
def purge(
    job_ids: IdsArg = None,
    step: StepOpt = None,
    task: TaskOpt = None,
    reason: ReasonOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
    force: Annotated[
        bool,
        typer.Option(
            "--force",
            help="Also purge dead letters whose step blocks an order (the order then stays "
            "blocked until `orders outbox retry STEP_ID` (or --all) runs its step again or "
            "`orders cancel` ends it).",
        ),
    ] = False,
) -> None:
    """Delete dead letters for good: the ones given by id, or every one matching the
    filters.

    A dead letter whose step blocks an order is refused (nothing is purged, exit 1)
    unless --force: redrive it (`orders dlq redrive JOB_ID`) or cancel the order
    (`orders cancel ORDER_ID`) instead. After a forced purge the order stays
    blocked until `orders outbox retry STEP_ID` (or `--all`) runs its step again
    or `orders cancel ORDER_ID` ends it; the command names them.
    """
    _check_filters(task, reason)
    _check_ids_or_filters(job_ids, task, reason)
    app, queues = _app_queues(step)
    try:
        chosen = _resolve(queues, job_ids)
        letters: dict[str, list[DeadLetter]] = {}
        failed: list[str] = []
        for queue in queues:
            ids = chosen.get(queue.name)
            if job_ids and not ids:
                continue
            try:
                if ids is None:
                    found = list(queue.dead_letters.iter(task=task, reason=reason))
                else:
                    found = [d for i in ids if (d := queue.dead_letters.show(i)) is not None]
            except QueueDataError as exc:  # this queue's DLQ key holds another type
                failed.append(f"queue {queue.name}: {exc}")
                continue
            letters[queue.name] = found
        every = [d for found in letters.values() for d in found]
        blocking = blocking_letters(app.session_factory, every)
        if blocking and not force:
            redrive, cancel = ways_out(blocking[0], purged=False)
            retry_one, retry_all, _ = ways_out(blocking[0], purged=True)
            fail(
                f"{len(blocking)} dead letter(s) block an order: {_blocked_orders(blocking)}; "
                f"purging would leave the order blocked with no dead letter to redrive; "
                f"nothing was purged. Redrive instead ({redrive}), cancel the order "
                f"({cancel}), or purge anyway with --force (the step then runs again only by "
                f"{retry_one} or {retry_all}, or the order ends by {cancel})"
            )
        if not yes and not job_ids:
            typer.confirm("Delete every matching dead letter for good?", abort=True)
        removed = 0
        for queue in queues:
            if letters.get(queue.name):
                try:
                    removed += queue.dead_letters.purge(ids=[d.job_id for d in letters[queue.name]])
                except QueueDataError as exc:  # refused whole: nothing of this queue purged
                    failed.append(f"queue {queue.name}: {exc}")
        audit_row(
            app,
            "purge",
            {
                "step": step,
                "task": task,
                "reason": reason,
                "force": force,
                "job_ids": [d.job_id for found in letters.values() for d in found],
            },
            count=removed,
            result=f"failed: {'; '.join(failed)}" if failed else "ok",
        )
        say("purged {} dead letter(s)", removed)
        if blocking:
            retry_one, retry_all, cancel = ways_out(blocking[0], purged=True)
            say(
                "left {} order(s) blocked with no dead letter: {}; run the step again with "
                "`{}` (every such step: `{}`), or end the order with `{}`",
                len({b.order_id for b in blocking}),
                _blocked_orders(blocking),
                retry_one,
                retry_all,
                cancel,
            )
        _exit_if(failed)
    finally:
        app.close()


def _blocked_orders(blocking: list[BlockingLetter], most: int = 5) -> str:
    """``order 12 (stock, step 57, job 1a2b...)`` for the first ``most`` blocking letters."""
    shown = ", ".join(
        f"order {b.order_id} ({b.step}, step {b.step_id}, job {b.job_id})" for b in blocking[:most]
    )
    return shown + (f" and {len(blocking) - most} more" if len(blocking) > most else "")
