"""Property tests generated from the API's own OpenAPI document (schemathesis): no
request gets a 5xx, every response matches the document (status, content type, body,
headers), invalid input is refused, and no 4xx writes anything.

Each operation gets ``API_EXAMPLES`` valid and as many invalid requests (CI: 15 each,
about twenty seconds in all); a longer run sets ``API_EXAMPLES=500``.
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from api_world import ApiWorld
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi import checks as openapi_checks
from sqlalchemy import func, select

from orders.domain.access import ApiOrder, OperatorAction
from orders.domain.models import Order
from workflows.models import WorkflowStep

EXAMPLES = int(os.environ.get("API_EXAMPLES", "15"))
CHECKS = [
    schemathesis.checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_schema_conformance,
    openapi_checks.response_headers_conformance,
    openapi_checks.negative_data_rejection,
]


def written(world: ApiWorld) -> tuple[int, ...]:
    with world.app.session_factory() as session:
        return tuple(
            session.scalar(select(func.count()).select_from(t))
            for t in (Order, WorkflowStep, ApiOrder, OperatorAction)
        )


@pytest.mark.slow
@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_the_api_keeps_its_document_and_writes_nothing_on_a_4xx(
    api_world: ApiWorld, mode: GenerationMode
) -> None:
    schema = schemathesis.openapi.from_asgi("/api/v1/openapi.json", api_world.client.app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) == 13  # 8 of orders, jobs and audit; 5 of queues
    auth = api_world.as_role("env")
    for operation in operations:

        @given(case=operation.as_strategy(generation_mode=mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def check(case: schemathesis.Case) -> None:
            before = written(api_world)
            response = case.call_and_validate(headers=auth, checks=CHECKS)
            if 400 <= response.status_code < 500:
                assert written(api_world) == before, (case.method, case.path, response.text)

        check()
