"""Id arguments past a 64-bit row id are bad usage (exit 2), not a driver overflow.

The bound is checked while parsing, before any service is reached, so these run
without Redis or a database.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from orders.cli.main import app

TOO_BIG = str(2**63)


@pytest.mark.parametrize(
    "args",
    [
        ["cancel", TOO_BIG],
        ["outbox", "retry", TOO_BIG],
        ["outbox", "retry", "0"],
        ["status", TOO_BIG],
    ],
)
def test_an_id_no_row_can_have_is_refused_as_bad_usage(args: list[str]) -> None:
    result = CliRunner().invoke(app, args)

    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "OverflowError" not in repr(result.exception)
