"""Every number the application takes has both bounds, and a number past one is bad usage.

Each int or float option and argument of every ``orders`` command, and each number
setting (``ORDERS_*``, ``ORDERS_WEB_*``, the queue's own), declares a lower and an
upper bound, so a new option without one fails here. Past its upper bound an option
is refused while parsing (exit 2, one line), before any service is reached: these
run without Redis or a database.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import annotated_types
import pytest
from pydantic import BaseModel, ValidationError
from typer.testing import CliRunner

from orders.app.settings import Settings
from orders.cli.main import COMMANDS, app, load
from orders.web.settings import WebSettings
from reliable_queue import QueueSettings


def _commands(path: list[str], command: Any) -> Iterator[tuple[list[str], Any]]:
    subcommands = getattr(command, "commands", None)
    if subcommands:
        for name, sub in subcommands.items():
            yield from _commands([*path, name], sub)
    else:
        yield path, command


def _bounds(param: Any) -> tuple[float | None, float | None]:
    info = param.type_descriptor.parameter_info
    parser = getattr(info, "parser", None)
    if parser is not None and hasattr(parser, "maximum"):
        return parser.minimum, parser.maximum
    return info.min, info.max


def number_params() -> list[tuple[list[str], Any]]:
    """(command path, param) of every int / float option or argument (lists included)."""
    found = []
    for entry in COMMANDS:
        for path, command in _commands([entry.name], load(entry)):
            for param in command.params:
                annotation = param.type_descriptor.annotation
                if annotation in (int, float, list[int], list[float]):
                    found.append((path, param))
    return found


PARAMS = number_params()
IDS = [f"{' '.join(path)} {param.opts[0] if param.opts else param.name}" for path, param in PARAMS]


def test_the_walk_finds_the_cli_number_options() -> None:
    assert {"place --count", "chaos --seed", "demo --stall-seconds", "status order_id"} <= set(IDS)


@pytest.mark.parametrize(("path", "param"), PARAMS, ids=IDS)
def test_every_number_option_and_argument_has_both_bounds(path: list[str], param: Any) -> None:
    low, high = _bounds(param)

    assert low is not None and high is not None, f"{' '.join(path)} {param.name}: unbounded"


@pytest.mark.parametrize(("path", "param"), PARAMS, ids=IDS)
def test_a_number_past_its_upper_bound_is_bad_usage(path: list[str], param: Any) -> None:
    _, high = _bounds(param)
    assert high is not None
    past = str(int(high) + 1)
    args = [*path, past] if param.param_type_name == "argument" else [*path, param.opts[0], past]

    result = CliRunner().invoke(app, args, env={"COLUMNS": "200"})

    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output


NUMBER_SETTINGS = [
    (model, name)
    for model in (Settings, WebSettings, QueueSettings)
    for name, f in model.model_fields.items()
    if f.annotation in (int, float, int | None, float | None)
]


@pytest.mark.parametrize(
    ("model", "name"), NUMBER_SETTINGS, ids=[f"{m.__name__}.{n}" for m, n in NUMBER_SETTINGS]
)
def test_every_number_setting_has_an_upper_bound(model: type[BaseModel], name: str) -> None:
    metadata = model.model_fields[name].metadata
    assert any(isinstance(m, annotated_types.Le | annotated_types.Lt) for m in metadata), name
    high = next(m for m in metadata if isinstance(m, annotated_types.Le | annotated_types.Lt))
    limit = high.le if isinstance(high, annotated_types.Le) else high.lt
    with pytest.raises(ValidationError):
        model(**{name: limit * 2 + 1})


def test_a_large_delay_setting_is_refused_before_it_can_overflow() -> None:
    with pytest.raises(ValidationError):
        Settings(backoff_max_seconds=9.3e15)
    with pytest.raises(ValidationError):
        QueueSettings(idempotency_window_seconds=2**64)
