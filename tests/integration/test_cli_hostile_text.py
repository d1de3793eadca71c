"""Untrusted text reaches the terminal as plain, visible text: no markup, no escape
sequences, no crash on a narrow encoding, within 80 columns.

The CLI runs as a subprocess (its stdout is a cp1252 pipe, COLUMNS=80) on a dead
letter and an order step whose texts are hostile: Rich markup (``[/]``), ESC and
OSC sequences, a bidi override, CJK and emoji.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from cli_processes import app_for, orders_command

from orders.app.pacing import place_paced
from orders.domain.handlers import StepRequest, record_step_failure
from orders.domain.queries import order_status
from orders.domain.steps import STEPS, STOCK
from orders.sources.tpch import load_tpch
from workflows.uow import UnitOfWork

HOSTILE = "boom [/] [bold]x\x1b[31mRED\x1b]0;owned\x07 \u202egnp.exe 注文 🍣 end"


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run([*orders_command(), *args], env=env, capture_output=True, timeout=120)


@pytest.fixture
def env(cli_env: dict[str, str], key_prefix: str) -> dict[str, str]:
    """The CLI's environment: database migrated, Redis running (built in-process: fast)."""
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix, COLUMNS="80")
    app_for(env, migrate=True).close()
    return env


@pytest.fixture
def dead_job(env: dict[str, str]) -> str:
    """A dead letter on points with a hostile error and payload; its id."""
    app = app_for(env, migrate=True)  # a configured database starts empty
    try:
        queue = app.queues["points"]
        job_id = queue.enqueue("orders.points", {"order_id": 7, "name": "注文 🍣 \x1b[2J"})
        leased = queue.fetch(1).jobs[0]
        assert queue.dead(leased.lease, "error", error=HOSTILE)
    finally:
        app.close()
    return job_id


def check(proc: subprocess.CompletedProcess[bytes], *, escaped: bool = True) -> str:
    """The output as text, after the checks every view must pass."""
    out, err = proc.stdout, proc.stderr
    assert proc.returncode == 0, (out + err)[-3000:]
    assert b"Traceback" not in err
    assert b"\x1b" not in out and b"\x07" not in out
    text = out.decode("cp1252")
    if escaped:
        assert "\\x1b" in text  # the escape is shown, not sent
    widest = max(len(line) for line in text.splitlines())
    assert widest <= 80, text
    return text


def test_dead_letter_views_show_hostile_text_safely_on_a_cp1252_pipe(
    env: dict[str, str], dead_job: str
) -> None:
    cp1252 = dict(env, PYTHONIOENCODING="cp1252:strict")
    listed = check(run(cp1252, "dlq", "list"))
    assert "boom [/] [bold]x" in listed  # markup shown as typed
    prefix = dead_job[:14]
    assert prefix in listed
    shown = check(run(cp1252, "dlq", "show", dead_job[:8]))
    assert dead_job in shown and "\\u202e" in shown and "?" in shown
    explained = check(run(cp1252, "explain", dead_job[:8]))
    assert "dead" in explained and dead_job in explained
    watched = check(run(cp1252, "watch", "--once", "--interval", "0.2"))
    assert prefix in watched and "Ctrl-C" not in watched


def test_order_status_shows_job_ids_and_a_hostile_error_safely(env: dict[str, str]) -> None:
    app = app_for(env, migrate=True)  # a configured database starts empty
    try:  # one order, its stock step queued (no worker runs it), one step failed
        load_tpch(app.session_factory, Path(env["ORDERS_DATA_DIR"]), scale=0.001)
        [order_id] = place_paced(app, 1, source="random").order_ids
        with UnitOfWork(app.session_factory) as uow:
            workflow_id = order_status(uow.session, order_id).workflow_id
        assert record_step_failure(  # stock: the step that runs first (points waits)
            app.session_factory, StepRequest(workflow_id, order_id, STOCK, 1), HOSTILE
        )
        job_ids = [app.queues[s].pending_job_for(f"{workflow_id}:{s}") for s in STEPS]
    finally:
        app.close()
    cp1252 = dict(env, PYTHONIOENCODING="cp1252:strict")
    text = check(run(cp1252, "status", str(order_id)), escaped=False)  # error cut to fit
    # stock runs first (ADR 0011): only its job is queued, the others wait for it
    assert job_ids[0] and job_ids[0][:14] in text, text
    assert all(j[:14] in text for j in job_ids if j) and "waiting" in text, text
    assert "boom [/]" in text
    overview = check(run(cp1252, "status"), escaped=False)
    assert "retried" in overview and "…" not in overview  # every column whole at 80


def test_after_services_stop_the_next_command_says_it_starts_redis_again(
    cli_env: dict[str, str], key_prefix: str
) -> None:
    if cli_env.get("ORDERS_REDIS_URL"):
        pytest.skip("an external Redis is configured: nothing embedded to start")
    env = dict(cli_env, ORDERS_QUEUE_PREFIX=key_prefix)
    assert run(env, "services", "start").returncode == 0
    stopped = run(env, "services", "stop")
    assert b"starts it again" in stopped.stdout
    listed = run(env, "dlq", "list")
    assert listed.returncode == 0, listed.stderr
    assert b"not running: starting it" in listed.stderr
    assert run(env, "services", "stop").returncode == 0
