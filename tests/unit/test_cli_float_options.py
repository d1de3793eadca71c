"""Every float option of the CLI refuses NaN and infinities as not being numbers.

A range check alone misreports NaN (it compares false with every bound, so it was
reported as past the upper bound) and lets ``inf`` through an option bounded on one
side only. These are refused while parsing, before any service is reached, so they
run without Redis or a database.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

from orders.cli.main import COMMANDS, app, load
from orders.cli.options import FiniteFloat


def _commands(path: list[str], command: Any) -> Iterator[tuple[list[str], Any]]:
    subcommands = getattr(command, "commands", None)
    if subcommands:
        for name, sub in subcommands.items():
            yield from _commands([*path, name], sub)
    else:
        yield path, command


def float_options() -> list[tuple[list[str], str, Any]]:
    """(command path, option name, param) of every float option of every command."""
    found = []
    for entry in COMMANDS:
        for path, command in _commands([entry.name], load(entry)):
            for param in command.params:
                descriptor = getattr(param, "type_descriptor", None)
                if descriptor is not None and descriptor.annotation is float:
                    found.append((path, param.opts[0], param))
    return found


FLOAT_OPTIONS = float_options()
IDS = [f"{' '.join(path)} {option}" for path, option, _ in FLOAT_OPTIONS]


def test_the_cli_has_float_options_to_check() -> None:
    assert {"place --rate", "dlq redrive --rate", "chaos --evict-every"} <= set(IDS)


@pytest.mark.parametrize(("path", "option", "param"), FLOAT_OPTIONS, ids=IDS)
def test_every_float_option_is_parsed_by_the_one_finite_parser(
    path: list[str], option: str, param: Any
) -> None:
    # checked first: an option without it might accept inf and run the command below
    assert isinstance(param.type_descriptor.parameter_info.parser, FiniteFloat)


@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e400"])
@pytest.mark.parametrize(("path", "option", "param"), FLOAT_OPTIONS, ids=IDS)
def test_nan_and_infinities_are_refused_as_not_numbers(
    path: list[str], option: str, param: Any, value: str
) -> None:
    assert isinstance(param.type_descriptor.parameter_info.parser, FiniteFloat)

    result = CliRunner().invoke(app, [*path, option, value], env={"COLUMNS": "200"})

    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    why = "is not a number (NaN)" if "nan" in value.lower() else "is not a finite number"
    assert f"{value} {why}" in result.output
    assert "less than" not in result.output and "greater than" not in result.output


def test_a_number_out_of_range_names_the_range_and_one_in_range_is_kept() -> None:
    parse = FiniteFloat(0.1, 100_000.0)
    assert parse("2.5") == 2.5 and parse(7) == 7.0
    result = CliRunner().invoke(app, ["place", "--rate", "100001"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "100001 is not in the range 0.1<=x<=100000.0" in result.output
    result = CliRunner().invoke(app, ["place", "--rate", "fast"], env={"COLUMNS": "200"})
    assert result.exit_code == 2
    assert "'fast' is not a number" in result.output


def test_help_still_shows_the_range() -> None:
    result = CliRunner().invoke(app, ["place", "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0
    assert "0.1<=x<=100000.0" in result.output
