"""Every operator verb of the CLI leaves one ``operator_actions`` row, shown by ``orders
audit --json``: who (the OS user), what, on which ids, dry run or not, how many."""

from __future__ import annotations

import json

import pytest
from sqlalchemy.orm import Session, sessionmaker
from typer.testing import CliRunner, Result

from orders.app.placement import place_orders
from orders.cli.main import app
from workflows.uow import UnitOfWork


def orders(env: dict[str, str], *args: str) -> Result:
    """The CLI in this process (faster than a subprocess once the services run)."""
    return CliRunner().invoke(app, list(args), env=env)


@pytest.fixture
def env(cli_env_on_test_db: dict[str, str]) -> dict[str, str]:
    return cli_env_on_test_db


def test_each_operator_verb_leaves_one_audit_row(
    env: dict[str, str],
    session_factory: sessionmaker[Session],
    catalog: dict[int, int],
    make_draft,
) -> None:
    with UnitOfWork(session_factory) as uow:
        (placed,) = place_orders(uow.session, [make_draft()])
        uow.commit()
    verbs = [
        ("cancel", str(placed.order_id)),
        ("queue", "pause", "points", "--reason", "provider down"),
        ("queue", "resume", "points"),
        ("queue", "limit", "points", "5/s"),
        ("queue", "limit", "points", "--clear"),
        ("queue", "cap", "points", "2"),
        ("queue", "cap", "points", "--clear"),
        ("dlq", "redrive", "--dry-run"),
        ("dlq", "purge", "--step", "points", "--yes"),
        ("tokens", "create", "ci-viewer", "--role", "viewer"),
        ("tokens", "revoke", "ci-viewer"),
        ("db", "rebind-redis", "--yes"),
    ]
    for verb in verbs:
        result = orders(env, *verb)
        assert result.exit_code == 0, (verb, result.output)
        if verb[:2] == ("tokens", "create"):
            token = result.stdout.strip().splitlines()[-1]  # alone on the last line
            assert token.startswith("of_") and " " not in token
    listed = orders(env, "audit", "--json")
    assert listed.exit_code == 0, listed.output
    rows = list(reversed(json.loads(listed.stdout)))
    assert [(r["action"], r["count"], r["dry_run"]) for r in rows] == [
        ("cancel", 1, False),
        ("pause", 1, False),
        ("resume", 1, False),
        ("limit", 1, False),
        ("limit", 1, False),
        ("cap", 1, False),
        ("cap", 1, False),
        ("redrive", 0, True),
        ("purge", 0, False),
        ("token_create", 1, False),
        ("token_revoke", 1, False),
        ("rebind", rows[-1]["count"], False),
    ]
    assert rows[0]["target"] == {"order_ids": [placed.order_id]}
    assert [r["target"] for r in rows if r["action"] == "cap"] == [
        {"step": "points", "cap": 2},
        {"step": "points", "cap": None},
    ]
    assert all(r["actor"].startswith("os:") and r["source"] == "cli" for r in rows)
    assert token not in listed.stdout  # the audit never holds a secret
    shown = orders(env, "audit")
    assert shown.exit_code == 0 and "token_create" in shown.stdout
