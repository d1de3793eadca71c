"""Process isolation's configuration and the data that crosses to the child (no Redis)."""

from __future__ import annotations

import random

import pytest
import redis

from reliable_queue import (
    AttemptLost,
    PermanentError,
    RetryPolicy,
    TaskDefinition,
    TaskRegistry,
    Worker,
)
from reliable_queue.attempts import ALWAYS
from reliable_queue.errors import IsolatedError, IsolatedPermanentError
from reliable_queue.execution import Dead, Prepared, Retry, outcome_of
from reliable_queue.isolation.wire import context_data, context_from, error_data, error_from
from reliable_queue.job import RawJob, make_context


def isolated_registry() -> TaskRegistry:
    tasks = TaskRegistry()
    tasks.task("slow", isolation="process")(lambda payload, ctx: None)
    return tasks


def test_an_unknown_isolation_is_refused():
    with pytest.raises(ValueError, match="isolation must be one of"):
        TaskDefinition("t", lambda p, c: None, None, RetryPolicy(), isolation="fork")
    with pytest.raises(ValueError, match="isolation must be one of"):
        TaskRegistry().task("t", isolation="Process")


def test_a_worker_with_an_isolated_task_needs_a_registry_factory():
    client = redis.Redis()
    with pytest.raises(ValueError, match="slow run in a child process"):
        Worker(client, ["jobs"], isolated_registry())
    client.close()


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("not a name", "must be 'package.module:function'"),
        ("no_such_module_here:registry", "cannot import no_such_module_here"),
        ("json:no_such_function", "json has no function 'no_such_function'"),
    ],
)
def test_a_registry_factory_that_cannot_be_found_is_refused_at_once(name, why):
    client = redis.Redis()
    with pytest.raises(ValueError, match=why):
        Worker(client, ["jobs"], isolated_registry(), isolated_registry=name)
    client.close()


def test_a_context_crosses_as_json_fields_without_its_guard():
    ctx = make_context("id", "jobs", "slow", 2, 5, "7:w", 7, 1.5, "key", ALWAYS)
    data = context_data(ctx)
    assert "guard" not in data
    assert context_from(data, ALWAYS) == ctx


def test_errors_cross_as_their_type_name_text_and_traceback():
    cause = LookupError("no such step")
    permanent = PermanentError("gone for good")
    permanent.__cause__ = cause
    back = error_from(error_data(permanent, "Traceback ...\nPermanentError: gone for good\n"))
    assert isinstance(back, IsolatedPermanentError) and isinstance(back, PermanentError)
    assert (back.type_name, back.message, back.cause_type_name) == (
        "PermanentError",
        "gone for good",
        "LookupError",
    )
    lost = error_from(error_data(AttemptLost("timed_out"), ""))
    assert isinstance(lost, AttemptLost) and lost.reason == "timed_out"
    plain = error_from(error_data(KeyError("k"), "tb"))
    assert type(plain) is IsolatedError and plain.type_name == "KeyError"


def test_an_unreadable_result_from_a_child_is_shown_as_text_never_trusted():
    assert type(error_from(["not", "a", "dict"])) is IsolatedError
    odd = error_from({"type": 3, "message": None, "permanent": "yes", "lost": "nonsense"})
    assert type(odd) is IsolatedError and odd.type_name == "3"


def test_a_childs_error_is_recorded_under_its_own_name_with_its_traceback():
    job = RawJob("jobs", "id", "1:w", 1, b"{}")
    definition = TaskDefinition("slow", lambda p, c: None, None, RetryPolicy(max_attempts=3))
    ctx = make_context("id", "jobs", "slow", 1, 3, "1:w", 1, 0.0, None, ALWAYS)
    item = Prepared(job, definition, {}, ctx, 3)
    error = IsolatedError("ValueError", "bad", "child traceback")
    outcome = outcome_of(item, error, "worker traceback", random.Random(1))
    assert isinstance(outcome, Retry)
    assert (outcome.error, outcome.traceback) == ("ValueError: bad", "child traceback")
    dead = outcome_of(item, IsolatedPermanentError("PermanentError", "no"), "", None)
    assert isinstance(dead, Dead) and (dead.reason, dead.error) == ("error", "PermanentError: no")
