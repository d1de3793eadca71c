"""Free text a client gives that reaches the database: one rule for all of it.

A NUL character cannot be sent in a PostgreSQL text parameter (the driver refuses the
whole statement, which would read as a failed database, not as bad input), and SQLite's
``LIKE`` stops a pattern at it (finding rows the text does not name). So text holding
one is refused as bad input when the model is validated, before any query, and each
interface reports it as its own bad-input error naming the field (the CLI exit 2, the
API 422, the dashboard 400). Pydantic's ``str`` already refuses a lone surrogate.

:class:`DatabaseInput` applies the rule to every text field of a model, those added
later included, so no field can be left out by forgetting to mark it.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, field_validator
from pydantic_core import PydanticCustomError

NUL = "\x00"


def refuse_nul(value: str) -> str:
    """Pass ``value`` through unless it holds a NUL character.

    The message shows the character as ``\\x00`` and its index, never the text itself,
    so a terminal, a page or a log shows nothing the client sent unescaped.

    Args:
        value: the text.

    Returns:
        ``value`` unchanged.

    Raises:
        PydanticCustomError: (type ``nul_character``) the text holds a NUL; inside model
            validation it becomes one error of the ``ValidationError``, at the field.
    """
    at = value.find(NUL)
    if at >= 0:
        raise PydanticCustomError(
            "nul_character",
            "holds a NUL character (\\x00) at index {index}, which the database cannot take",
            {"index": at},
        )
    return value


class DatabaseInput(BaseModel):
    """A model of client input that reaches the database: every field whose value is
    text refuses a NUL (:func:`refuse_nul`), in this model and its subclasses.

    The check runs after each field's own validation, so a field's length bounds and
    allowed values keep their own messages.
    """

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: Any) -> Any:
        return refuse_nul(value) if isinstance(value, str) else value
