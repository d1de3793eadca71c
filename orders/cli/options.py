"""Option kinds shared by the commands, each checked in one place.

``float("nan")`` and ``float("inf")`` parse as floats, and a range check alone
does not refuse them well: NaN compares false with every bound, so a
``min``/``max`` check reports it as past a bound ("should be less than or
equal to 100000"), and an option with one bound lets ``inf`` through. Every
float option of the CLI is therefore a :func:`number_option`, whose parser
refuses NaN and infinities as what they are, then checks the range.

``--log-level`` takes a level name (:data:`LOG_LEVELS`); an unknown name is
refused instead of silently meaning INFO.

Every number option and argument has both bounds (a test walks every command to
check it): a number past them is bad usage (exit 2) before anything runs. The
table is in docs/reliability.md, "Hostile input".
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import typer
from pydantic_core import PydanticCustomError

__all__ = [
    "LOG_LEVELS",
    "SEED_MAX",
    "FiniteFloat",
    "JsonOutput",
    "Lanes",
    "OrderSource",
    "OrdersToPlace",
    "log_level_option",
    "number_option",
]

#: Largest ``--seed`` (a seed is a 64-bit signed number wherever it is recorded).
SEED_MAX = 2**63 - 1


def _bounds(minimum: float | None, maximum: float | None) -> str:
    """The range as typer prints it in help: ``0.1<=x<=100000.0``, ``x>=0``."""
    if minimum is None:
        return f"x<={maximum}"
    if maximum is None:
        return f"x>={minimum}"
    return f"{minimum}<=x<={maximum}"


class FiniteFloat:
    """Parser of one float option: a finite number within ``[minimum, maximum]``.

    Args:
        minimum / maximum: inclusive bounds (None: unbounded on that side).

    Calling it with the option's text (or a default number) returns the float;
    a bad value raises ``PydanticCustomError``, which typer reports as
    ``Invalid value for '--opt': <why>`` with exit status 2.
    """

    def __init__(self, minimum: float | None = None, maximum: float | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def _refuse(self, why: str) -> PydanticCustomError:
        if self.minimum is not None or self.maximum is not None:
            why = f"{why}; give a number in {_bounds(self.minimum, self.maximum)}"
        # the text goes in as context: braces in what the user typed are not a template
        return PydanticCustomError("cli_number", "{why}", {"why": why})

    def __call__(self, value: Any) -> float:
        """``value`` (text or number) as a float.

        Raises:
            PydanticCustomError: not a number, NaN, infinite, or out of range.
        """
        if isinstance(value, bool):
            raise self._refuse(f"{value!r} is not a number")
        try:
            number = float(value)
        except (TypeError, ValueError):
            raise self._refuse(f"{str(value)!r} is not a number") from None
        if math.isnan(number):
            raise self._refuse(f"{value} is not a number (NaN)")
        if math.isinf(number):
            raise self._refuse(f"{value} is not a finite number")
        too_small = self.minimum is not None and number < self.minimum
        too_big = self.maximum is not None and number > self.maximum
        if too_small or too_big:
            why = f"{value} is not in the range {_bounds(self.minimum, self.maximum)}"
            raise PydanticCustomError("cli_number", "{why}", {"why": why})
        return number


def number_option(
    *param_decls: str,
    min: float | None = None,  # noqa: A002 - the name typer.Option uses
    max: float | None = None,  # noqa: A002
    **kwargs: Any,
) -> Any:
    """``typer.Option`` for a float: finite, within ``[min, max]``, range shown in help.

    Args:
        param_decls: option names, as for ``typer.Option`` (default: from the parameter).
        min / max: inclusive bounds (None: unbounded on that side).
        kwargs: any other ``typer.Option`` argument (``help=``, ...).

    Returns:
        The ``OptionInfo`` to put in ``Annotated[float, ...]``.
    """
    return typer.Option(*param_decls, min=min, max=max, parser=FiniteFloat(min, max), **kwargs)


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
"""Log level names ``--log-level`` accepts (any case)."""


def _log_level(value: str) -> str:
    """The level name in upper case.

    Raises:
        typer.BadParameter: not one of :data:`LOG_LEVELS`.
    """
    if value.upper() not in LOG_LEVELS:
        raise typer.BadParameter(
            f"unknown log level {value!r}; choose from {', '.join(LOG_LEVELS)}"
        )
    return value.upper()


def log_level_option() -> Any:
    """``typer.Option`` for ``--log-level``: one of :data:`LOG_LEVELS`, any case (upper
    case is what the command gets)."""
    return typer.Option(help=f"{', '.join(LOG_LEVELS)}.", callback=_log_level)


# Options several commands share, declared once (each command gives its default).
OrdersToPlace = Annotated[int, typer.Option(min=1, max=1_000_000, help="Orders to place.")]
"""``--orders``: how many orders a run places (``orders demo``, ``orders chaos``)."""
OrderSource = Annotated[str, typer.Option(help="Order source: tpch or random.")]
"""``--source``: where a run's orders come from."""
Lanes = Annotated[int, typer.Option(min=1, max=32, help="Lanes per worker process.")]
"""``--concurrency``: lanes (threads) of each worker process a run starts."""
JsonOutput = Annotated[bool, typer.Option("--json", help="Print the report as JSON.")]
"""``--json``: print the command's report as JSON instead of tables."""
