"""No password ever reaches the terminal: configured URLs are shown masked."""

from __future__ import annotations

import json

from typer.testing import CliRunner, Result

from orders.cli.main import app

SECRET_URLS = {
    "ORDERS_REDIS_URL": "redis://:hunter2@127.0.0.1:1/0",
    "ORDERS_DATABASE_URL": "postgresql://orders:topsecret@127.0.0.1:1/orders",
}


def orders(args: list[str], env: dict[str, str]) -> Result:
    return CliRunner().invoke(app, args, env={**env, **SECRET_URLS})


def test_services_status_shows_configured_urls_without_their_passwords(
    cli_env: dict[str, str],
) -> None:
    as_json = orders(["services", "status", "--json"], cli_env)
    assert as_json.exit_code == 0, as_json.output
    info = json.loads(as_json.stdout)
    assert info["redis_url"] == "redis://:***@127.0.0.1:1/0"
    assert info["database_url"] == "postgresql://orders:***@127.0.0.1:1/orders"
    plain = orders(["services", "status"], cli_env)
    for out in (as_json.output, plain.output):
        assert "hunter2" not in out and "topsecret" not in out


def test_an_error_naming_a_url_does_not_print_its_password(cli_env: dict[str, str]) -> None:
    result = orders(["dlq", "list"], cli_env)
    assert result.exit_code != 0
    assert "hunter2" not in result.output


def test_query_and_slash_passwords_are_masked_in_status_and_errors(
    cli_env: dict[str, str],
) -> None:
    env = {
        **cli_env,
        "ORDERS_REDIS_URL": "redis://127.0.0.1:1/0?password=hunter2",
        "ORDERS_DATABASE_URL": "postgresql://orders:top/secret@127.0.0.1:1/orders",
    }
    runner = CliRunner()
    status = runner.invoke(app, ["services", "status", "--json"], env=env)
    assert status.exit_code == 0, status.output
    failing = runner.invoke(app, ["dlq", "list"], env=env)
    assert failing.exit_code != 0
    for out in (status.output, failing.output):
        assert "hunter2" not in out and "top/secret" not in out and "secret@" not in out
