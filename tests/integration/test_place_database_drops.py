"""`orders place` rides out a dropped database connection, places no order twice, and
always says how many orders it committed."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator

import psycopg
import pytest
from cli_processes import orders_command, wait_until
from sqlalchemy import event, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from orders.app.placement import Reconnect, place
from orders.domain.models import Order, OrderLine
from orders.sources.drafts import RANDOM

on_postgresql = pytest.mark.skipif(
    not os.environ.get("TEST_DATABASE_URL"), reason="terminates PostgreSQL sessions"
)


@pytest.fixture
def env(cli_env: dict[str, str], database_url: str, catalog: dict[int, int]) -> dict[str, str]:
    """The CLI on the catalog fixture's database (random orders need only the catalog)."""
    return dict(cli_env, ORDERS_DATABASE_URL=database_url)


def placed_in(session_factory: sessionmaker[Session]) -> tuple[int, int]:
    """(orders, orders without lines) in the database."""
    with session_factory() as session:
        orders = session.scalar(select(func.count()).select_from(Order)) or 0
        bare = (
            session.scalar(
                select(func.count()).where(
                    ~select(OrderLine.order_id).where(OrderLine.order_id == Order.id).exists()
                )
            )
            or 0
        )
    return int(orders), int(bare)


def admin(database_url: str) -> psycopg.Connection:
    """An autocommit connection to the server's maintenance database."""
    url = make_url(database_url).set(drivername="postgresql", database="postgres")
    return psycopg.connect(url.render_as_string(hide_password=False), autocommit=True)


def terminate_placing_sessions(database_url: str) -> int:
    """Terminate the test database's sessions caught inside a placement transaction
    (writing orders or their lines: a statement no other transaction sends)."""
    name = make_url(database_url).database
    with admin(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = %s AND pid <> pg_backend_pid() "
            "AND state IN ('active', 'idle in transaction') "
            "AND (query ILIKE '%%order_lines%%' OR query ILIKE '%%INTO orders %%' "
            "OR query ILIKE 'COPY orders %%')",
            (name,),
        ).fetchone()
    return int(row[0]) if row else 0


@on_postgresql
@pytest.mark.slow
def test_place_rides_out_terminated_sessions_and_places_each_order_once(
    env: dict[str, str], database_url: str, session_factory: sessionmaker[Session]
) -> None:
    """Regression: `orders place` aborted when its PostgreSQL connection dropped (278 of
    800 placed) and did not say how many orders were committed."""
    proc = subprocess.Popen(
        [*orders_command(), "place", "--count", "4000", "--source", "random", "--json"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    hits = 0
    while proc.poll() is None and hits < 2:  # two placement sessions killed mid-transaction
        if terminate_placing_sessions(database_url):
            hits += 1
            time.sleep(1.0)  # let the retry through
        time.sleep(0.02)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, out[-2000:] + err[-3000:]
    report = json.loads(out)
    assert hits >= 1 and report["reconnects"] >= hits, (hits, report["reconnects"])
    assert len(report["order_ids"]) == 4000
    assert placed_in(session_factory) == (4000, 0)  # none twice, none half-written


class LostReply:
    """Makes the next commit's reply look lost: the driver reports a dropped connection
    right after (``after_commit``: it committed) or right before (``before_commit``:
    it did not) the COMMIT."""

    def __init__(self, session_factory: sessionmaker[Session], when: str) -> None:
        self.armed = True
        event.listen(session_factory, when, self.fire)

    def fire(self, session: Session) -> None:
        if self.armed:
            self.armed = False
            raise OperationalError(
                "COMMIT",
                {},
                ConnectionError("server closed the connection"),
                connection_invalidated=True,
            )


@pytest.mark.parametrize("when", ["after_commit", "before_commit"])
def test_a_batch_whose_commit_reply_was_lost_is_settled_by_asking_the_database(
    session_factory: sessionmaker[Session], catalog: dict[int, int], when: str
) -> None:
    """A commit the client never heard back from is kept when the database says it
    committed, and placed again (once) when it says it did not: never twice."""
    fault = LostReply(session_factory, when)
    pauses: list[float] = []
    result = place(
        session_factory,
        30,
        source=RANDOM,
        rng=random.Random(3),
        batch_size=10,
        reconnect=Reconnect(attempts=3, base_seconds=0.01),
        sleep=pauses.append,
    )
    assert not fault.armed
    assert placed_in(session_factory) == (30, 0)
    assert len(result.order_ids) == 30
    with session_factory() as session:
        assert sorted(result.order_ids) == sorted(session.scalars(select(Order.id)))
    assert result.reconnects == (1 if when == "before_commit" else 0)


@pytest.mark.slow
def test_ctrl_c_ends_place_with_the_count_it_committed(
    env: dict[str, str], session_factory: sessionmaker[Session]
) -> None:
    """Regression: Ctrl-C ended `orders place` with "interrupted" and no word of the
    orders already committed."""
    proc = subprocess.Popen(
        [*orders_command(), "place", "--count", "100000", "--rate", "300", "--source", "random"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: placed_in(session_factory)[0] >= 100, 60, "some orders placed")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, out[-2000:] + err[-2000:]
    assert "interrupted" in err and "Traceback" not in err
    committed, bare = placed_in(session_factory)
    assert bare == 0
    said = " ".join(out.split())
    placed = int(said.split("placed ", 1)[1].split(" ", 1)[0])
    maybe = int(said.split(" more order(s)")[0].rsplit(" ", 1)[1]) if "may have" in said else 0
    assert committed in (placed, placed + maybe), said  # a batch it could not settle is named


@pytest.fixture
def closed_database(database_url: str) -> Iterator[Callable[[], None]]:
    """A callable that stops the test database from taking connections (and ends the
    ones it has); connections are allowed again at teardown."""
    name = make_url(database_url).database

    def close() -> None:
        with admin(database_url) as conn:
            conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS false')
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = %s AND pid <> pg_backend_pid()",
                (name,),
            )

    yield close
    with admin(database_url) as conn:
        conn.execute(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS true')


@on_postgresql
@pytest.mark.slow
def test_a_database_that_stays_away_ends_place_with_exit_1_and_the_count(
    env: dict[str, str],
    session_factory: sessionmaker[Session],
    closed_database: Callable[[], None],
    engine,
) -> None:
    proc = subprocess.Popen(
        [*orders_command(), "place", "--count", "100000", "--rate", "300", "--source", "random"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(lambda: placed_in(session_factory)[0] >= 100, 60, "some orders placed")
        engine.dispose()  # our own connections go too
        closed_database()
        out, err = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out[-2000:] + err[-2000:]
    assert "cannot use the database" in err and "Traceback" not in err
    text = " ".join(out.split())
    assert "before the failure below" in text
    with admin(env["ORDERS_DATABASE_URL"]) as conn:
        conn.execute(
            f'ALTER DATABASE "{make_url(env["ORDERS_DATABASE_URL"]).database}" '
            "ALLOW_CONNECTIONS true"
        )
    committed, bare = placed_in(session_factory)
    assert bare == 0 and f"placed {committed} order(s)" in text
