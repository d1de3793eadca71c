"""``orders status`` says when the database holds dead steps whose dead letters Redis no
longer has (a flush, a restore, the DLQ's bounds): those cannot be redriven from the DLQ,
and `orders outbox retry --all` is what runs them again. Before, the overview showed
``dead 4`` beside ``DLQ 0`` and nothing else."""

from __future__ import annotations

import pytest
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner

from orders.app.placement import place_orders
from orders.cli.main import app
from orders.cli.status import _dead_without_letters
from orders.domain.handlers import mark_step_dead
from orders.domain.steps import STOCK
from workflows.uow import UnitOfWork


@pytest.fixture
def env(cli_env_on_test_db: dict[str, str]) -> dict[str, str]:
    return dict(cli_env_on_test_db, COLUMNS="200")


def test_status_names_dead_steps_whose_letters_are_gone(
    env: dict[str, str],
    session_factory: sessionmaker[Session],
    catalog: dict[int, int],
    make_draft,
) -> None:
    with UnitOfWork(session_factory) as uow:
        placed = place_orders(uow.session, [make_draft(), make_draft()])
        uow.commit()
    quiet = CliRunner().invoke(app, ["status"], env=env)
    assert quiet.exit_code == 0, quiet.output
    assert "without a dead letter" not in quiet.output
    for p in placed:  # dead in the database; the DLQ of this prefix holds no letter
        mark_step_dead(session_factory, p.workflow_id, STOCK, "error", error="ValueError: x")
    shown = CliRunner().invoke(app, ["status"], env=env)
    assert shown.exit_code == 0, shown.output
    line = next(ln for ln in shown.output.splitlines() if "without a dead letter" in ln)
    assert "stock 2" in line and "orders outbox retry --all" in line


def test_only_steps_with_more_dead_rows_than_letters_are_named() -> None:
    by_state = {"stock": {"dead": 3}, "points": {"dead": 1}, "logistics": {"done": 5}}
    queues = {"stock": {"dead": 1}, "points": {"dead": 4}, "logistics": {"dead": 0}}
    assert _dead_without_letters(by_state, queues) == {"stock": 2}
