"""POST /api/v1/orders and the order routes on a real database and Redis: placement through
the outbox, the Idempotency-Key rules, problems that name the field and write nothing,
reading an order back and cancelling it."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import anyio.to_thread
import pytest
from api_world import ApiWorld
from sqlalchemy import func, select, update

from orders.app.api_orders import (
    InFlight,
    InvalidOrder,
    KeyRules,
    LineRequest,
    Pending,
    PlaceRequest,
    commit_placements,
)
from orders.app.api_orders import place_api_order as place_direct
from orders.domain.access import ApiOrder
from orders.domain.handlers import StepRequest, handle_step
from orders.domain.models import Order, OrderLine
from orders.domain.queries import order_status
from orders.domain.steps import STEPS
from orders.web.api.routes import order_out, render_order
from reliable_queue import explain
from reliable_queue.trace_context import TraceContext
from workflows.columns import utcnow
from workflows.models import Workflow, WorkflowStep

ORDER = {
    "customer_id": 1,
    "lines": [{"part_id": 10, "quantity": 2}, {"part_id": 11, "quantity": 1}],
}


def counts(world: ApiWorld) -> tuple[int, ...]:
    """Rows of every table a placement writes."""
    with world.app.session_factory() as session:
        return tuple(
            session.scalar(select(func.count()).select_from(t))
            for t in (Order, OrderLine, Workflow, WorkflowStep, ApiOrder)
        )


def place(world: ApiWorld, body: Any = ORDER, key: str | None = None, role: str = "placer"):
    headers = world.as_role(role)
    if key is not None:
        headers["Idempotency-Key"] = key
    return world.client.post("/api/v1/orders", json=body, headers=headers)


def test_placing_answers_201_with_location_and_the_order_published_through_the_outbox(
    api_world: ApiWorld,
) -> None:
    reply = place(api_world)
    assert reply.status_code == 201, reply.text
    body = reply.json()
    assert reply.headers["location"] == f"/api/v1/orders/{body['id']}"
    assert body["status"] == "placed" and body["source"] == "api"
    assert body["total_price"] == "28.50"  # 3 units at 9.50
    stock = next(s for s in body["steps"] if s["step"] == "stock")
    assert stock["status"] == "dispatched"
    # published after the commit: the stock job is on its queue under the step's key
    key = f"{body['workflow_id']}:stock"
    assert api_world.app.queues["stock"].pending_job_for(key) is not None


def test_same_key_and_body_answer_the_first_response_and_place_once(api_world: ApiWorld) -> None:
    first = place(api_world, key="order-7")
    again = place(api_world, key='"order-7"')  # the draft's quoted form is the same key
    assert first.status_code == again.status_code == 201
    assert again.text == first.text
    assert again.headers["idempotent-replayed"] == "true"
    assert counts(api_world)[0] == 1


def test_same_key_with_another_body_is_422_and_writes_nothing(api_world: ApiWorld) -> None:
    place(api_world, key="order-8")
    before = counts(api_world)
    other = place(api_world, {**ORDER, "customer_id": 2}, key="order-8")
    assert other.status_code == 422
    assert other.headers["content-type"] == "application/problem+json"
    assert other.json()["field"] == "Idempotency-Key"
    assert counts(api_world) == before


def test_keys_belong_to_their_token(api_world: ApiWorld) -> None:
    mine = place(api_world, key="shared")
    theirs = place(api_world, key="shared", role="other")
    assert theirs.status_code == 201 and theirs.json()["id"] != mine.json()["id"]


def test_a_key_still_in_flight_is_409_and_writes_nothing(api_world: ApiWorld) -> None:
    in_flight = api_world.client.app.api.state.api.in_flight  # type: ignore[attr-defined]
    with in_flight.hold("placer", "busy"):
        reply = place(api_world, key="busy")
    assert reply.status_code == 409 and reply.json()["field"] == "Idempotency-Key"
    assert counts(api_world)[0] == 0
    assert place(api_world, key="busy").status_code == 201  # served once the first is done


@pytest.mark.slow
def test_twenty_threads_with_one_key_place_exactly_one_order(api_world: ApiWorld) -> None:
    replies: list[Any] = []
    start = threading.Barrier(20)

    def client() -> None:
        start.wait()
        replies.append(place(api_world, key="burst"))

    threads = [threading.Thread(target=client) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(replies) == 20
    assert {r.status_code for r in replies} <= {201, 409}
    ids = {r.json()["id"] for r in replies if r.status_code == 201}
    assert len(ids) == 1
    assert counts(api_world)[0] == 1


def test_a_key_past_its_window_places_a_new_order(api_world: ApiWorld) -> None:
    first = place(api_world, key="old")
    with api_world.app.session_factory() as session:  # a day and a minute ago
        session.execute(
            update(ApiOrder).values(created_at=utcnow() - timedelta(hours=24, minutes=1))
        )
        session.commit()
    second = place(api_world, key="old")
    assert second.status_code == 201 and second.json()["id"] != first.json()["id"]
    assert second.headers.get("idempotent-replayed") is None


BAD_BODIES = [
    ({"customer_id": 99, "lines": [{"part_id": 10, "quantity": 1}]}, "customer_id"),
    (
        {
            "customer_id": 1,
            "lines": [{"part_id": 10, "quantity": 1}, {"part_id": 99, "quantity": 1}],
        },
        "lines.1.part_id",
    ),
    ({"customer_id": 1, "lines": [{"part_id": 10, "quantity": 0}]}, "lines.0.quantity"),
    ({"customer_id": 1, "lines": [{"part_id": 10, "quantity": -3}]}, "lines.0.quantity"),
    ({"customer_id": 1, "lines": []}, "lines"),
    ({"customer_id": 1, "lines": [{"part_id": 10, "quantity": 1}] * 2}, "lines"),
    ({"customer_id": 1, "lines": [{"part_id": p, "quantity": 1} for p in range(1, 52)]}, "lines"),
    ({"customer_id": "one", "lines": [{"part_id": 10, "quantity": 1}]}, "customer_id"),
    ({"lines": [{"part_id": 10, "quantity": 1}]}, "customer_id"),
    ({**ORDER, "priority": 10}, "priority"),
    # strict: a number is a JSON integer (these were read as 3, 1 and customer 1000)
    ({**ORDER, "priority": "3"}, "priority"),
    ({**ORDER, "priority": True}, "priority"),
    ({**ORDER, "customer_id": 1e3}, "customer_id"),
    ({"customer_id": 1, "lines": [{"part_id": 10, "quantity": "2"}]}, "lines.0.quantity"),
    ({**ORDER, "coupon": "FREE"}, "coupon"),
]


@pytest.mark.parametrize(("body", "field"), BAD_BODIES)
def test_a_bad_body_is_a_problem_naming_its_field_and_writes_nothing(
    api_world: ApiWorld, body: Any, field: str
) -> None:
    reply = place(api_world, body, key="k")
    assert reply.status_code == 422, reply.text
    assert reply.headers["content-type"] == "application/problem+json"
    problem = reply.json()
    assert problem["status"] == 422 and problem["field"] == field, problem
    assert counts(api_world) == (0, 0, 0, 0, 0)
    assert place(api_world, key="k").status_code == 201  # the refused key was not kept


def test_wrong_content_type_huge_body_and_missing_token_are_problems(api_world: ApiWorld) -> None:
    client = api_world.client
    auth = api_world.as_role("placer")
    text = client.post(
        "/api/v1/orders", content=b"{}", headers={**auth, "content-type": "text/plain"}
    )
    assert text.status_code == 415 and text.json()["field"] == "Content-Type"
    huge = client.post(
        "/api/v1/orders",
        content=b'{"customer_id": 1, "lines": [' + b" " * 20_000 + b"]}",
        headers={**auth, "content-type": "application/json"},
    )
    assert huge.status_code == 413 and huge.headers["content-type"] == "application/problem+json"
    anonymous = client.post("/api/v1/orders", json=ORDER)
    assert anonymous.status_code == 401 and anonymous.json()["field"] == "Authorization"
    bad_key = place(api_world, key="no spaces allowed")
    assert bad_key.status_code == 422 and bad_key.json()["field"] == "Idempotency-Key"
    assert counts(api_world) == (0, 0, 0, 0, 0)


@pytest.mark.parametrize(
    ("content", "status", "why"),
    [
        (b'{"customer_id": 1, "lines": [', 422, ""),  # malformed JSON
        (b'{"customer_id": 1, "lines": [], "note": "\xff"}', 400, "not UTF-8 text"),
        # valid JSON, deeper than the parser goes: it was called "not UTF-8 text"
        (b"[" * 5_000 + b"]" * 5_000, 400, "nested too deeply"),  # 10 kB
    ],
    ids=["malformed", "not UTF-8", "too deep"],
)
def test_a_body_that_is_not_json_is_a_problem_naming_the_body_and_writes_nothing(
    api_world: ApiWorld, content: bytes, status: int, why: str
) -> None:
    headers = {**api_world.as_role("placer"), "content-type": "application/json"}
    reply = api_world.client.post("/api/v1/orders", content=content, headers=headers)
    assert reply.status_code == status, reply.text
    problem = reply.json()
    assert problem["field"] == "body", problem
    [error] = problem["errors"]
    assert error["field"] == "body" and "not valid JSON" in error["message"], problem
    assert why in error["message"], problem
    assert problem["detail"] == f"body: {error['message']}", problem
    assert counts(api_world) == (0, 0, 0, 0, 0)


def test_get_order_has_the_facts_of_orders_status_json(api_world: ApiWorld) -> None:
    order_id = place(api_world).json()["id"]
    reply = api_world.client.get(f"/api/v1/orders/{order_id}", headers=api_world.as_role("viewer"))
    assert reply.status_code == 200
    body = reply.json()
    with api_world.app.session_factory() as session:
        view = order_status(session, order_id)
    assert view is not None
    facts = view.to_dict()
    assert body["id"] == facts["order_id"] and body["status"] == facts["status"]
    assert [s["step"] for s in body["steps"]] == [s["step"] for s in facts["steps"]]
    assert [s["status"] for s in body["steps"]] == [s["status"] for s in facts["steps"]]
    assert body["steps"][0]["job_id"]  # the stock job, found in Redis by its key
    missing = api_world.client.get("/api/v1/orders/999", headers=api_world.as_role("viewer"))
    assert missing.status_code == 404 and missing.json()["field"] == "order_id"


def test_an_order_id_past_the_id_columns_range_is_422_not_a_database_error(
    api_world: ApiWorld,
) -> None:
    viewer = api_world.as_role("viewer")
    largest = api_world.client.get("/api/v1/orders/2147483647", headers=viewer)
    assert largest.status_code == 404
    past = api_world.client.get("/api/v1/orders/2147483648", headers=viewer)
    assert past.status_code == 422 and past.json()["field"] == "order_id"
    customer = place(api_world, {**ORDER, "customer_id": 2**31})
    assert customer.status_code == 422 and customer.json()["field"] == "customer_id"


def test_cancel_is_idempotent_and_409_once_the_order_completed(api_world: ApiWorld) -> None:
    operator = api_world.as_role("operator")
    first = place(api_world).json()
    url = f"/api/v1/orders/{first['id']}/cancel"
    once = api_world.client.post(url, headers=operator)
    twice = api_world.client.post(url, headers=operator)
    assert once.status_code == twice.status_code == 200
    assert not once.json()["already_cancelled"] and twice.json()["already_cancelled"]
    done = place(api_world).json()
    for step in STEPS:
        handle_step(
            api_world.app.session_factory, StepRequest(done["workflow_id"], done["id"], step)
        )
    late = api_world.client.post(f"/api/v1/orders/{done['id']}/cancel", headers=operator)
    assert late.status_code == 409, late.text
    with api_world.app.session_factory() as session:
        assert session.get(Order, done["id"]).status == "completed"


def test_a_key_another_server_commits_first_answers_that_servers_response(
    api_world: ApiWorld, database_url: str
) -> None:
    """Two server processes place one key at once: the one whose insert of the key
    fails on the unique index answers the other's stored response, placing nothing."""
    if not database_url.startswith("postgresql"):
        pytest.skip("on SQLite the other writer waits for this one's write lock (in-process)")
    factory = api_world.app.session_factory
    rules = KeyRules("raced", "f" * 64, 3600)
    request = PlaceRequest(1, (LineRequest(10, 1),))
    other: list[int] = []

    def render(view) -> str:  # inside this placement's transaction: the other server wins
        if not other:
            other.append(
                place_direct(
                    factory,
                    lambda: None,
                    request,
                    placed_by="placer",
                    rules=rules,
                    render=lambda v: json.dumps({"id": v.order_id}),
                    in_flight=InFlight(),
                ).order_id
            )
        return json.dumps({"id": view.order_id})

    placed = place_direct(
        factory,
        lambda: None,
        request,
        placed_by="placer",
        rules=rules,
        render=render,
        in_flight=InFlight(),
    )
    assert placed.replayed and placed.order_id == other[0]
    assert counts(api_world)[0] == 1  # the loser's order rolled back with its key


def test_the_placement_answer_is_what_reading_the_order_back_gives(api_world: ApiWorld) -> None:
    """The answer is built from the rows as written, not read back: it must say what
    ``order_status`` reads in the same state."""
    answer = place(api_world, key="view").json()
    with api_world.app.session_factory() as session:
        view = order_status(session, answer["id"])
    assert view is not None
    assert answer == json.loads(json.dumps(order_out(view)))


def batch_item(key: str | None, customer: int = 1, part: int = 10) -> Pending:
    """A placement of one unit of ``part`` for ``customer`` by the placer token."""
    request = PlaceRequest(customer, (LineRequest(part, 1),))
    return Pending(request, "placer", KeyRules(key, f"{customer}:{part}".ljust(64, "0"), 3600))


def render_id(view: Any) -> str:
    return json.dumps({"id": view.order_id})


def test_one_transaction_places_a_batch_and_a_refused_item_writes_nothing(
    api_world: ApiWorld,
) -> None:
    factory = api_world.app.session_factory
    first = commit_placements(factory, render_id, [batch_item("a")])
    outcomes = commit_placements(
        factory,
        render_id,
        [batch_item("b"), batch_item("c", part=99), batch_item("a"), batch_item(None)],
    )
    placed_b, refused, replay, unkeyed = outcomes
    assert isinstance(refused, InvalidOrder) and refused.field == "lines.0.part_id"
    assert not isinstance(placed_b, Exception) and not placed_b[0].replayed
    assert len(placed_b[1]) == 1  # its first step, to publish after the commit
    assert not isinstance(replay, Exception) and replay[0].replayed and replay[1] == []
    assert not isinstance(first[0], Exception) and replay[0].order_id == first[0][0].order_id
    assert not isinstance(unkeyed, Exception)
    assert counts(api_world) == (3, 3, 3, 3 * len(STEPS), 3)


def test_a_batch_that_breaks_the_key_index_is_written_again_one_by_one(
    api_world: ApiWorld,
) -> None:
    """Two items with one key in one batch (two processes' worth): the batch fails on
    the unique index, then each is written alone and the second answers the first."""
    factory = api_world.app.session_factory
    one, two, other = commit_placements(
        factory, render_id, [batch_item("same"), batch_item("same"), batch_item("x")]
    )
    assert not isinstance(one, Exception) and not isinstance(two, Exception)
    assert not isinstance(other, Exception)
    assert two[0].replayed and two[0].order_id == one[0].order_id
    assert counts(api_world)[0] == 2


@pytest.mark.slow
def test_twenty_threads_with_their_own_keys_place_twenty_orders_once_each(
    api_world: ApiWorld,
) -> None:
    replies: list[Any] = []
    start = threading.Barrier(20)

    def client(n: int) -> None:
        start.wait()
        replies.append(place(api_world, key=f"k{n}"))
        replies.append(place(api_world, key=f"k{n}"))  # its retry

    threads = [threading.Thread(target=client, args=(n,)) for n in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert [r.status_code for r in replies] == [201] * 40
    assert len({r.json()["id"] for r in replies}) == 20
    assert counts(api_world) == (20, 40, 20, 20 * len(STEPS), 20)  # two lines each


def test_a_batch_publishes_its_first_steps_in_one_call_or_leaves_them_to_the_sweep(
    api_world: ApiWorld,
) -> None:
    factory, app = api_world.app.session_factory, api_world.app
    went = commit_placements(
        factory, render_id, [batch_item("p1"), batch_item("p2")], publisher=lambda: app.publisher
    )
    for outcome in went:
        assert not isinstance(outcome, Exception)
        placed, left = outcome
        assert left == [] and placed.deferred == 0
    with factory() as session:
        workflows = session.scalars(select(Workflow.id)).all()
    assert all(app.queues["stock"].pending_job_for(f"{w}:stock") for w in workflows)

    def unreachable() -> Any:
        raise ConnectionError("queue away")

    kept = commit_placements(
        factory, render_id, [batch_item("p3"), batch_item("p4")], publisher=unreachable
    )
    assert [o[0].deferred for o in kept if not isinstance(o, Exception)] == [1, 1]
    assert counts(api_world)[0] == 4  # placed all the same: the sweep publishes them


@pytest.mark.parametrize(("priority", "expected"), [(0, 0), (9, 9), (None, 5)])
def test_an_api_orders_steps_carry_its_priority_and_the_customers_fairness_key(
    api_world: ApiWorld, priority: int | None, expected: int
) -> None:
    body = dict(ORDER) if priority is None else {**ORDER, "priority": priority}
    reply = place(api_world, body)
    assert reply.status_code == 201, reply.text
    workflow_id = reply.json()["workflow_id"]
    stock = api_world.app.queues["stock"]
    job = stock.pending_job_for(f"{workflow_id}:stock")
    assert job is not None
    found = explain(stock, job)
    assert (found.priority, found.fairness_key) == (expected, "customer-1")
    with api_world.app.session_factory() as session:  # the later steps, when released
        rows = session.scalars(
            select(WorkflowStep).where(WorkflowStep.workflow_id == workflow_id)
        ).all()
    assert {(r.priority, r.fairness_key) for r in rows} == {(expected, "customer-1")}


def test_an_urgent_api_order_overtakes_a_backlog_of_default_ones(api_world: ApiWorld) -> None:
    for _ in range(3):
        assert place(api_world).status_code == 201
    urgent = place(api_world, {**ORDER, "customer_id": 2, "priority": 0})
    stock = api_world.app.queues["stock"]
    first = stock.fetch(1).jobs[0]
    assert first.job_id == stock.pending_job_for(f"{urgent.json()['workflow_id']}:stock")


def test_each_order_of_a_batch_carries_its_own_callers_trace_context(
    api_world: ApiWorld,
) -> None:
    """Without a tracer an order carries its caller's context as is: in a shared
    transaction, each order's step rows carry their own request's."""
    parents = [TraceContext.parse(f"00-{str(n) * 32}-{'ab' * 8}-01") for n in (1, 2)]
    items = [
        Pending(batch_item(f"t{n}").request, "placer", batch_item(f"t{n}").rules, parent)
        for n, parent in enumerate(parents)
    ]
    outcomes = commit_placements(api_world.app.session_factory, render_id, items)
    with api_world.app.session_factory() as session:
        for outcome, parent in zip(outcomes, parents, strict=True):
            assert not isinstance(outcome, Exception) and parent is not None
            order_id = json.loads(outcome[0].body)["id"]
            rows = session.scalars(
                select(WorkflowStep.traceparent)
                .join(Workflow, Workflow.id == WorkflowStep.workflow_id)
                .where(Workflow.subject_id == order_id)
            ).all()
            assert set(rows) == {parent.traceparent}


def test_a_refused_batch_item_with_an_expired_key_writes_nothing(api_world: ApiWorld) -> None:
    """A key past its window is released only for a placement that goes ahead: in a
    shared transaction, a refused item leaves the expired key's row as it was."""
    factory = api_world.app.session_factory
    first = commit_placements(factory, render_id, [batch_item("late")])
    assert not isinstance(first[0], Exception)
    with factory() as session:
        session.execute(update(ApiOrder).values(created_at=utcnow() - timedelta(hours=2)))
        session.commit()
    refused, placed = commit_placements(
        factory, render_id, [batch_item("late", part=99), batch_item("other")]
    )
    assert isinstance(refused, InvalidOrder) and not isinstance(placed, Exception)
    with factory() as session:
        row = session.get(ApiOrder, first[0][0].order_id)
        assert row is not None and row.idempotency_key == "late"
        assert row.response_body is not None


def test_an_item_whose_answer_fails_leaves_the_others_of_its_batch_placed(
    api_world: ApiWorld,
) -> None:
    """An unexpected error of one item (here its answer cannot be built) is that item's:
    the others of its batch are placed and answered, each exactly once."""

    def render(view: Any) -> str:
        if view.customer_id == 2:
            raise ValueError("cannot render")
        return render_id(view)

    factory = api_world.app.session_factory
    one, broken, three = commit_placements(
        factory, render, [batch_item("r1"), batch_item("r2", customer=2), batch_item("r3")]
    )
    assert isinstance(broken, ValueError)
    assert not isinstance(one, Exception) and not isinstance(three, Exception)
    assert one[0].order_id != three[0].order_id
    assert counts(api_world)[0] == 2


def test_placements_wait_for_their_transaction_without_a_thread_of_the_pool(
    api_world: ApiWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's token, once remembered, is checked on the event loop and the
    placement waits for the group commit's writer there: request threads do not bound
    how many placements wait together for the next transaction."""
    api_world.client.app.api.state.api.auth.lookup.ttl = 3600.0  # type: ignore[attr-defined]
    assert place(api_world).status_code == 201  # the token read, expired keys released
    handed: list[Any] = []
    real = anyio.to_thread.run_sync

    async def counted(func: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        handed.append(func)
        return await real(func, *args, **kwargs)

    monkeypatch.setattr(anyio.to_thread, "run_sync", counted)
    replies = [place(api_world, key=f"t{n}") for n in range(5)]
    assert [r.status_code for r in replies] == [201] * 5
    assert handed == []


def test_a_placements_answer_is_the_json_of_order_out(api_world: ApiWorld) -> None:
    """The answer stored with a key is rendered by the JSON encoder from the view as it
    is; it is the JSON of ``order_out``, as the order's GET answers it."""
    reply = place(api_world)
    with api_world.app.session_factory() as session:
        view = order_status(session, reply.json()["id"])
    assert view is not None
    assert render_order(view) == json.dumps(order_out(view))
