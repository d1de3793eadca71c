"""Every error of ``/api/v1`` as an RFC 9457 problem (``application/problem+json``) that
names the field at fault; nothing is written when a request is refused
(docs/adr/0039-the-front-door-tokens-and-idempotency.md)."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from http import HTTPStatus
from typing import Any

import redis
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import SQLAlchemyError
from starlette.exceptions import HTTPException

from orders.observability.urls import mask_urls_in
from orders.web.api.schemas import Problem
from reliable_queue import QueueError

log = logging.getLogger("orders.api")

MEDIA_TYPE = "application/problem+json"
DOCUMENTED = (400, 401, 403, 404, 409, 413, 415, 422, 429, 503)
"""The error statuses every route documents (a route answers those that apply)."""


class ApiProblem(Exception):
    """Answer with a problem: ``status``, ``detail``, the ``field`` at fault, headers."""

    def __init__(
        self,
        status: int,
        detail: str,
        *,
        field: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail
        self.field = field
        self.headers = dict(headers or {})


def problem(
    status: int,
    detail: str,
    *,
    instance: str | None = None,
    errors: Sequence[tuple[str, str]] = (),
    field: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> JSONResponse:
    """A problem response.

    Args:
        status: the HTTP status.
        detail: what went wrong, for a person (credentials masked).
        instance: the request path.
        errors: (field, message) pairs; the first field is also ``field``.
        field: the field at fault when ``errors`` is empty.
        headers: extra headers (``Retry-After``).
    """
    fields = [{"field": f, "message": mask_urls_in(m)} for f, m in errors]
    body = Problem(
        title=HTTPStatus(status).phrase,
        status=status,
        detail=mask_urls_in(detail),
        instance=instance,
        field=field or (fields[0]["field"] if fields else None),
        errors=fields,  # type: ignore[arg-type]
    )
    return JSONResponse(
        body.model_dump(), status_code=status, media_type=MEDIA_TYPE, headers=dict(headers or {})
    )


def responses() -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` entries of the documented error statuses."""
    ref = {"$ref": "#/components/schemas/Problem"}
    return {
        status: {
            "model": Problem,
            "description": HTTPStatus(status).phrase,
            "content": {MEDIA_TYPE: {"schema": ref}},
        }
        for status in DOCUMENTED
    }


def _field(loc: Sequence[Any]) -> str:
    where = [str(p) for p in loc]
    if not where:
        return "body"
    if where[0] == "body":
        return ".".join(where[1:]) or "body"
    return where[1] if len(where) > 1 else where[0]


def _error(error: Mapping[str, Any]) -> tuple[str, str]:
    """One validation error as (field, message); a body that is not JSON names ``body``
    (FastAPI's location of that error is the character offset, not a field)."""
    if error.get("type") == "json_invalid":
        loc = list(error.get("loc", ()))
        where = f" at character {loc[1]}" if len(loc) > 1 else ""
        why = (error.get("ctx") or {}).get("error", "")
        return "body", f"not valid JSON{where}" + (f": {why}" if why else "")
    return _field(error.get("loc", ())), str(error.get("msg", "invalid"))


async def _validation(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = [_error(e) for e in exc.errors()]
    first = errors[0] if errors else ("body", "invalid")
    return problem(
        422, f"{first[0]}: {first[1]}", instance=request.url.path, errors=errors or [first]
    )


async def _api_problem(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ApiProblem)
    errors = [(exc.field, exc.detail)] if exc.field else []
    return problem(
        exc.status, exc.detail, instance=request.url.path, errors=errors, headers=exc.headers
    )


#: FastAPI's 400 for a body it could not read as JSON (not UTF-8, nested too deeply, ...)
_UNPARSED_BODY = "There was an error parsing the body"


def _unparsed_because(cause: BaseException | None) -> str:
    """Why FastAPI could not read a body (the exception its 400 was raised from)."""
    if isinstance(cause, UnicodeDecodeError):
        return "not UTF-8 text"
    if isinstance(cause, RecursionError):
        return "nested too deeply"
    return "it could not be read"


async def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    status = exc.status_code if exc.status_code in DOCUMENTED else 404
    if status == 400 and exc.detail == _UNPARSED_BODY:
        message = f"not valid JSON: {_unparsed_because(exc.__cause__)}"
        errors = [("body", message)]
        return problem(400, f"body: {message}", instance=request.url.path, errors=errors)
    return problem(status, str(exc.detail), instance=request.url.path, headers=exc.headers)


async def _unavailable(request: Request, exc: Exception) -> Response:
    message = mask_urls_in(str(exc)).splitlines()[0] if str(exc) else type(exc).__name__
    log.warning("%s %s: %s", request.method, request.url.path, message)
    return problem(
        503,
        f"a backing service failed: {message}",
        instance=request.url.path,
        headers={"Retry-After": "1"},
    )


def install(api: FastAPI) -> None:
    """Register the problem handlers on ``api``."""
    api.add_exception_handler(RequestValidationError, _validation)
    api.add_exception_handler(ApiProblem, _api_problem)
    api.add_exception_handler(HTTPException, _http)
    for kind in (SQLAlchemyError, QueueError, redis.RedisError):
        api.add_exception_handler(kind, _unavailable)
