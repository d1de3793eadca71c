"""The unit of work commits only when told to, and always closes its session."""

from __future__ import annotations

from decimal import Decimal

import pytest
from sqlalchemy import func, select

from orders.domain.models import Customer
from workflows.uow import UnitOfWork


def customer(customer_id: int) -> Customer:
    return Customer(
        id=customer_id,
        name="c",
        nation_key=0,
        market_segment="HOUSEHOLD",
        account_balance=Decimal("0"),
    )


def count(session_factory) -> int:
    with session_factory() as session:
        return session.scalar(select(func.count()).select_from(Customer))


def test_leaving_without_commit_rolls_back(session_factory):
    with UnitOfWork(session_factory) as uow:
        uow.session.add(customer(1))
        uow.session.flush()
    assert count(session_factory) == 0


def test_commit_keeps_the_work_and_later_changes_roll_back(session_factory):
    with UnitOfWork(session_factory) as uow:
        uow.session.add(customer(1))
        uow.commit()
        uow.session.add(customer(2))
        uow.session.flush()
    assert count(session_factory) == 1


def test_session_is_closed_and_unavailable_outside_the_block(session_factory):
    uow = UnitOfWork(session_factory)
    with pytest.raises(RuntimeError):
        _ = uow.session
    with uow:
        session = uow.session
    assert not session.in_transaction()
    with pytest.raises(RuntimeError):
        _ = uow.session
