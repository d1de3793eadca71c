"""Worker and web logs carry no Alembic INFO chatter at their start (DEBUG keeps it)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from orders.cli.context import setup_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root, alembic = logging.getLogger(), logging.getLogger("alembic")
    handlers, level, alembic_level = list(root.handlers), root.level, alembic.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        alembic.setLevel(alembic_level)


@pytest.mark.usefixtures("restore_logging")
def test_alembic_info_lines_are_hidden_at_info_and_shown_at_debug() -> None:
    setup_logging("INFO")
    assert not logging.getLogger("alembic.runtime.migration").isEnabledFor(logging.INFO)
    logging.getLogger("alembic").setLevel(logging.NOTSET)
    setup_logging("DEBUG")
    assert logging.getLogger("alembic.runtime.migration").isEnabledFor(logging.INFO)


@pytest.mark.parametrize("command", ["worker", "web"])
def test_an_unknown_log_level_is_bad_usage_naming_the_levels(command: str) -> None:
    from typer.testing import CliRunner

    from orders.cli.main import COMMANDS, app, load

    [entry] = [e for e in COMMANDS if e.name == command]
    [option] = [p for p in load(entry).params if p.name == "log_level"]
    # checked first: without the check, the command below would start serving
    assert option.callback is not None

    result = CliRunner().invoke(app, [command, "--log-level", "verbose"], env={"COLUMNS": "200"})

    assert result.exit_code == 2, result.output
    assert "unknown log level 'verbose'" in result.output
    assert "DEBUG, INFO, WARNING, ERROR" in result.output
