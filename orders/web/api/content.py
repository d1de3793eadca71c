"""What the API's request bodies must be sent as: ``application/json``.

FastAPI parses a body as JSON only when its ``Content-Type`` says JSON; any other body
it does not read at all, so an optional body sent as ``text/plain`` was silently taken
as absent (a pause without its reason) and a required one was refused as a missing
field (422). Both are a body in the wrong media type: 415, before anything else.
"""

from __future__ import annotations

from starlette.requests import Request

from orders.web.api.problems import ApiProblem

JSON_TYPES = ("application/json",)
"""Media types a request body may have (parameters such as ``charset`` aside)."""


def media_type(request: Request) -> str:
    """The request's ``Content-Type`` without parameters, lower case ("" when absent)."""
    return request.headers.get("content-type", "").split(";")[0].strip().lower()


async def require_json(request: Request) -> None:
    """Refuse a request whose ``Content-Type`` is not JSON (a route whose body is required).

    Raises:
        ApiProblem: 415 naming ``Content-Type``.
    """
    if media_type(request) not in JSON_TYPES:
        raise ApiProblem(415, "send the body as application/json", field="Content-Type")


async def json_if_any(request: Request) -> None:
    """Refuse a non-empty body whose ``Content-Type`` is not JSON; no body passes (a route
    whose body is optional, or where FastAPI's own 422 names the missing body).

    Raises:
        ApiProblem: 415 naming ``Content-Type``.
    """
    if media_type(request) in JSON_TYPES or not await request.body():
        return
    raise ApiProblem(415, "send the body as application/json", field="Content-Type")
