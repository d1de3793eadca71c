"""No password ever reaches the terminal: configured URLs are shown masked."""

from __future__ import annotations

import json
import subprocess

from cli_processes import orders_command

SECRET_URLS = {
    "ORDERS_REDIS_URL": "redis://:hunter2@127.0.0.1:1/0",
    "ORDERS_DATABASE_URL": "postgresql://orders:topsecret@127.0.0.1:1/orders",
}


def orders(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*orders_command(), *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_services_status_shows_configured_urls_without_their_passwords(
    cli_env: dict[str, str],
) -> None:
    env = dict(cli_env, **SECRET_URLS)
    as_json = orders(["services", "status", "--json"], env)
    assert as_json.returncode == 0, as_json.stderr
    info = json.loads(as_json.stdout)
    assert info["redis_url"] == "redis://:***@127.0.0.1:1/0"
    assert info["database_url"] == "postgresql://orders:***@127.0.0.1:1/orders"
    plain = orders(["services", "status"], env)
    for out in (as_json.stdout + as_json.stderr, plain.stdout + plain.stderr):
        assert "hunter2" not in out and "topsecret" not in out


def test_an_error_naming_a_url_does_not_print_its_password(cli_env: dict[str, str]) -> None:
    proc = orders(["dlq", "list"], dict(cli_env, **SECRET_URLS))
    assert proc.returncode != 0
    assert "hunter2" not in proc.stdout + proc.stderr
