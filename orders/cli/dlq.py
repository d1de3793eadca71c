"""``orders dlq``: list, show, redrive and purge dead-lettered step jobs."""

from __future__ import annotations

import datetime as dt
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from orders.cli.context import console, emit_json, fail, handle_errors, make_app
from orders.domain.steps import STEPS
from reliable_queue import DEAD_REASONS, DeadLetter, Queue

dlq = typer.Typer(
    help="Dead-letter queues of the step queues: list, show, redrive, purge.", no_args_is_help=True
)

StepOpt = Annotated[str | None, typer.Option("--step", help="Only this step's queue.")]
TaskOpt = Annotated[
    str | None, typer.Option("--task", help="Only this task name, e.g. orders.points.")
]
ReasonOpt = Annotated[
    str | None, typer.Option("--reason", help=f"Only this reason: {', '.join(DEAD_REASONS)}.")
]


def _queues(step: str | None) -> list[Queue]:
    if step is not None and step not in STEPS:
        fail(f"unknown step {step!r}; choose from {', '.join(STEPS)}", code=2)
    app = make_app()
    return [app.queues[s] for s in ([step] if step else STEPS)]


def _check_reason(reason: str | None) -> None:
    if reason is not None and reason not in DEAD_REASONS:
        fail(f"unknown reason {reason!r}; choose from {', '.join(DEAD_REASONS)}", code=2)


def _when(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


@dlq.command("list")
@handle_errors
def list_(
    step: StepOpt = None,
    task: TaskOpt = None,
    reason: ReasonOpt = None,
    limit: Annotated[int, typer.Option(min=1, help="Most entries shown per queue.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """List dead letters, oldest first."""
    _check_reason(reason)
    letters: list[DeadLetter] = []
    for queue in _queues(step):
        letters.extend(queue.dead_letters.iter(task=task, reason=reason, limit=limit))
    if as_json:
        emit_json([d.as_dict() for d in letters])
        return
    table = Table(title=f"dead letters ({len(letters)})")
    for col in ("job id", "queue", "task", "reason", "attempts", "dead at (UTC)", "error"):
        table.add_column(col)
    for d in letters:
        table.add_row(
            escape(d.job_id),
            d.queue,
            escape(d.task or "?"),
            escape(d.reason),
            str(d.attempts),
            _when(d.dead_at),
            escape(d.error[:80]),
        )
    console.print(table)


@dlq.command()
@handle_errors
def show(
    job_id: Annotated[str, typer.Argument(help="Job id from `orders dlq list`.")],
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Show one dead letter in full: payload, reason, error, traceback."""
    for queue in _queues(None):
        letter = queue.dead_letters.show(job_id)
        if letter is not None:
            if as_json:
                emit_json(letter.as_dict())
            else:
                for key, value in letter.as_dict().items():
                    console.print(f"[bold]{key}[/]: {escape(str(value))}", highlight=False)
            return
    fail(f"no dead letter with id {job_id!r}")


@dlq.command()
@handle_errors
def redrive(
    job_ids: Annotated[
        list[str] | None, typer.Argument(help="Exact job ids (default: all matching).")
    ] = None,
    step: StepOpt = None,
    task: TaskOpt = None,
    reason: ReasonOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Only show what would be replayed.")
    ] = False,
    rate: Annotated[
        float | None, typer.Option(min=0.1, help="At most this many jobs per second.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Replay dead letters (each runs again with a fresh attempt count)."""
    _check_reason(reason)
    summary = {"redriven": [], "skipped": [], "not_dead": [], "dry_run": dry_run}
    found: set[str] = set()
    for queue in _queues(step):
        ids = None
        if job_ids:
            ids = [j for j in job_ids if queue.dead_letters.show(j) is not None]
            found.update(ids)
            if not ids:
                continue
        report = queue.dead_letters.redrive(
            ids=ids, task=task, reason=reason, dry_run=dry_run, rate=rate
        )
        summary["redriven"].extend(report.redriven)  # type: ignore[union-attr]
        summary["skipped"].extend(report.skipped)  # type: ignore[union-attr]
    summary["not_dead"] = [j for j in (job_ids or []) if j not in found]
    if as_json:
        emit_json(summary)
    else:
        verb = "would redrive" if dry_run else "redrove"
        console.print(
            f"{verb} {len(summary['redriven'])} job(s); skipped {len(summary['skipped'])}"
        )  # type: ignore[arg-type]
    if summary["not_dead"]:
        fail(f"not in any dead-letter queue: {', '.join(summary['not_dead'])}")  # type: ignore[arg-type]


@dlq.command()
@handle_errors
def purge(
    job_ids: Annotated[
        list[str] | None, typer.Argument(help="Exact job ids (default: all matching).")
    ] = None,
    step: StepOpt = None,
    task: TaskOpt = None,
    reason: ReasonOpt = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Delete dead letters for good."""
    _check_reason(reason)
    queues = _queues(step)
    if not yes and not job_ids:
        typer.confirm("Delete every matching dead letter for good?", abort=True)
    removed = 0
    for queue in queues:
        removed += queue.dead_letters.purge(ids=job_ids or None, task=task, reason=reason)
    console.print(f"purged {removed} dead letter(s)")
