"""Checking request parameters: a bad one is a 400 with a message, never a 500."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from starlette.convertors import Convertor

JOB_ID = re.compile(r"^[A-Za-z0-9:_\-.]{1,128}$")


class JobIdConvertor(Convertor[str]):
    """A path parameter holding one stored job id: the rest of the path, any character.

    Starlette's ``path`` convertor stops at a newline (``.`` in its regex); a job
    id from Redis may hold one.
    """

    regex = r"[\s\S]+"

    def convert(self, value: str) -> str:
        """The id a matched path segment holds.

        Args:
            value: the percent-decoded path text (str).

        Returns:
            ``value`` unchanged.
        """
        return value

    def to_string(self, value: str) -> str:
        """The path text for an id (``url_path_for``).

        Args:
            value: a job id (str).

        Returns:
            ``value`` unchanged (the URL layer percent-encodes it).
        """
        return value


class BadParam(Exception):
    """A request parameter is missing or invalid; the message says which and why.

    Attributes:
        status: the HTTP status to answer with (400 unless said otherwise).
        links: (href, text) pairs the error page lists below the message (the
            candidates of an ambiguous job id prefix); empty by default.
    """

    def __init__(
        self, message: str, status: int = 400, *, links: list[tuple[str, str]] | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.links = links or []


def one_of(params: Mapping[str, Any], name: str, allowed: Iterable[str]) -> str | None:
    """Parameter ``name`` if it is one of ``allowed``; None when absent or empty.

    Raises:
        BadParam: present but not allowed.
    """
    value = params.get(name)
    if value is None or value == "":
        return None
    allowed = list(allowed)
    if value not in allowed:
        raise BadParam(f"unknown {name} {value!r}; choose from {', '.join(allowed)}")
    return str(value)


def integer(params: Mapping[str, Any], name: str, *, default: int, low: int, high: int) -> int:
    """Parameter ``name`` as an integer in ``[low, high]`` (``default`` when absent).

    Raises:
        BadParam: not an integer, or out of range.
    """
    value = params.get(name)
    if value is None or value == "":
        return default
    return bounded_int(str(value), name, low=low, high=high)


def bounded_int(value: str, name: str, *, low: int, high: int) -> int:
    """``value`` as an integer in ``[low, high]``.

    Raises:
        BadParam: not an integer, or out of range.
    """
    try:
        number = int(value)
    except ValueError:
        raise BadParam(f"{name} must be an integer, not {value!r}") from None
    if not low <= number <= high:
        raise BadParam(f"{name} must be between {low} and {high}, not {number}")
    return number


def job_id(value: str | None, name: str = "job id") -> str:
    """A job id: 1-128 letters, digits or ``:_-.``.

    Raises:
        BadParam: missing or malformed.
    """
    if not value:
        raise BadParam(f"{name} is missing")
    if not JOB_ID.match(value):
        raise BadParam(f"{name} {value!r} is malformed (letters, digits and :_-. only)")
    return value


def stored_job_id(value: str | None, name: str = "job id") -> str:
    """A job id to look up exactly as given, whatever its characters.

    A producer sharing the Redis may store any text as a job id; links and
    forms carry it as stored (percent-encoded, attribute-escaped), and an exact
    lookup passes it to Redis as an argument, never as a pattern or a key name.

    Args:
        value: the id from the path or a form.
        name: what to call it in the message.

    Returns:
        ``value`` unchanged.

    Raises:
        BadParam: missing or empty.
    """
    if not value:
        raise BadParam(f"{name} is missing")
    return value


def job_ids(values: Iterable[str]) -> list[str]:
    """The non-empty values, duplicates dropped, order kept.

    No shape check: each id is looked up exactly, and one that names no dead
    letter is reported on its own instead of failing its batch.

    Args:
        values: the ``ids`` fields of a form.

    Returns:
        The ids as given (empty ones dropped).
    """
    return list(dict.fromkeys(v for v in values if v))


def flag(params: Mapping[str, Any], name: str) -> bool:
    """A checkbox-style boolean: ``1``, ``true``, ``on``, ``yes`` are true; absent is false.

    Raises:
        BadParam: any other value.
    """
    value = str(params.get(name, "") or "").lower()
    if value in ("", "0", "false", "off", "no"):
        return False
    if value in ("1", "true", "on", "yes"):
        return True
    raise BadParam(f"{name} must be 1 or 0, not {value!r}")


def local_path(value: str | None, default: str = "/") -> str:
    """A redirect target on this site (``/...``, never ``//host`` or a full URL)."""
    if not value or not value.startswith("/") or value.startswith("//") or "\\" in value:
        return default
    return value
