"""A password in a configured URL appears in no output and no log line, whatever it holds.

A ``/`` in a Redis password once split the URL where the parser saw a path: the
URL was masked, but redis-py's own error quoted the password up to the ``/``
("Port could not be cast to integer value as 'pa'"). Every command that touches
Redis or the database runs here with passwords holding ``/ @ : % # ?`` and non-ASCII
letters, against hosts that do not answer, and nothing it prints (its errors and
its log lines included) may carry the password or any piece of it.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orders.cli.main import app as cli

# two pieces a parser may cut the password into, each distinctive enough to search for
HEAD, TAIL = "Zq7x", "Kv9w"
PASSWORDS = [f"{HEAD}{cut}{TAIL}" for cut in ("/", "@", ":", "%", "#", "?", "é/ü")]

COMMANDS = [
    ["status"],
    ["status", "--json"],
    ["status", "1"],
    ["dlq", "list"],
    ["dlq", "show", "1a2b3c4d5e6f"],
    ["dlq", "redrive"],
    ["dlq", "purge", "--yes"],
    ["explain", "1a2b3c4d5e6f"],
    ["place", "-n", "1", "--source", "random"],
    ["cancel", "1"],
    ["outbox", "list"],
    ["queue", "audit"],
    ["inject", "stock", "--fail-rate", "0.5"],
    ["watch", "--once"],
    ["services", "status"],
    ["services", "status", "--json"],
    ["db", "upgrade"],
    ["worker", "stock", "--log-level", "DEBUG"],
]


def shown_by_every_command(env: dict[str, str]) -> str:
    """Everything the commands print (stdout and stderr, log lines included).

    A command that sets up logging points the root logger at the runner's stderr,
    which is closed after the call: the handlers are put back after each command.
    """
    out = []
    root = logging.getLogger()
    for args in COMMANDS:
        handlers, level = list(root.handlers), root.level
        try:
            result = CliRunner().invoke(cli, args, env=env)
        finally:
            root.handlers[:] = handlers
            root.setLevel(level)
        out.append(f"$ orders {' '.join(args)} -> {result.exit_code}\n{result.output}")
        if result.exception and not isinstance(result.exception, SystemExit):
            out.append(repr(result.exception))
    return "\n".join(out)


def assert_hidden(text: str, password: str) -> None:
    for piece in (password, HEAD, TAIL):
        at = text.find(piece)
        assert at < 0, f"{piece!r} shown:\n{text[max(0, at - 400) : at + 200]}"


@pytest.mark.no_database
@pytest.mark.parametrize("password", PASSWORDS)
def test_a_redis_password_is_in_no_output_or_log_line(password: str, tmp_path: Path) -> None:
    env = {
        "ORDERS_DATA_DIR": str(tmp_path / "data"),
        "ORDERS_REDIS_URL": f"redis://:{password}@127.0.0.1:1/0",
        "COLUMNS": "200",
    }

    text = shown_by_every_command(env)

    assert "cannot use Redis" in text or "not a Redis URL" in text  # the commands did fail
    assert_hidden(text, password)


@pytest.mark.no_database
@pytest.mark.parametrize("password", PASSWORDS)
def test_a_database_password_is_in_no_output_or_log_line(
    password: str, tmp_path: Path, redis_url: str, key_prefix: str
) -> None:
    env = {
        "ORDERS_DATA_DIR": str(tmp_path / "data"),
        "ORDERS_REDIS_URL": redis_url,
        "ORDERS_QUEUE_PREFIX": key_prefix,
        "ORDERS_DATABASE_URL": f"postgresql://orders:{password}@127.0.0.1:1/orders",
        "COLUMNS": "200",
    }

    text = shown_by_every_command(env)

    assert "database" in text  # the commands did fail on it
    assert_hidden(text, password)


def test_a_password_piece_is_masked_even_where_no_url_is_left(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from orders.observability.urls import mask_urls_in

    monkeypatch.setenv("ORDERS_REDIS_URL", "redis://:pa/ss@127.0.0.1:1/0")

    masked = mask_urls_in("Port could not be cast to integer value as 'pa'; spa pass")

    assert masked == "Port could not be cast to integer value as '***'; spa pass"


def test_an_unexpected_error_keeps_its_traceback_with_the_password_masked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import typer

    from orders.cli.context import handle_errors

    monkeypatch.setenv("ORDERS_REDIS_URL", f"redis://:{PASSWORDS[0]}@127.0.0.1:1/0")
    single = typer.Typer()

    @single.command()
    @handle_errors
    def broken() -> None:
        raise RuntimeError(f"a bug that quotes {HEAD!r} and {TAIL}")

    result = CliRunner().invoke(single, [])

    assert result.exit_code == 1
    assert "Traceback" in result.output and "RuntimeError: a bug that quotes" in result.output
    assert_hidden(result.output, PASSWORDS[0])
