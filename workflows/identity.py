"""The identity of a database: the id created with its schema (``database_identity``)."""

from __future__ import annotations

import uuid

from sqlalchemy import select
from sqlalchemy.orm import Session

from workflows.columns import utcnow
from workflows.models import DatabaseIdentity
from workflows.uow import SessionFactory, UnitOfWork


def database_id(session_factory: SessionFactory) -> str:
    """Return this database's id (a UUID string), creating it if the row is missing.

    The migration that creates the table writes the id; a schema built some
    other way (``metadata.create_all``) gets one on first use. Should two
    processes race to create it, both then read the same (oldest) row.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database failed.
    """
    with UnitOfWork(session_factory) as uow:
        found = _oldest(uow.session)
        if found is not None:
            return found
        uow.session.add(DatabaseIdentity(id=str(uuid.uuid4()), created_at=utcnow()))
        uow.commit()
        return _oldest(uow.session) or ""


def _oldest(session: Session) -> str | None:
    return session.scalars(
        select(DatabaseIdentity.id)
        .order_by(DatabaseIdentity.created_at, DatabaseIdentity.id)
        .limit(1)
    ).first()
