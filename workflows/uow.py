"""Unit of work: one database transaction owned by one session."""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from sqlalchemy.orm import Session

SessionFactory = Callable[[], Session]


class UnitOfWork:
    """Own one session for one transaction; roll back unless committed.

    Use as a context manager::

        with UnitOfWork(session_factory) as uow:
            uow.session.add(...)
            uow.commit()

    Leaving the block without ``commit()`` (or by an exception) rolls back.
    The session is closed on exit either way.

    Args:
        session_factory: zero-argument callable returning a new ``Session``
            (a ``sessionmaker``).
    """

    def __init__(self, session_factory: SessionFactory) -> None:
        self._session_factory = session_factory
        self._session: Session | None = None

    @property
    def session(self) -> Session:
        """The session of the open unit of work.

        Raises:
            RuntimeError: outside the ``with`` block.
        """
        if self._session is None:
            raise RuntimeError("unit of work is not open")
        return self._session

    def __enter__(self) -> UnitOfWork:
        self._session = self._session_factory()
        return self

    def commit(self) -> None:
        """Commit the transaction; later changes start a new one."""
        self.session.commit()

    def rollback(self) -> None:
        """Roll back the transaction and discard pending changes."""
        self.session.rollback()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        session, self._session = self._session, None
        if session is None:
            return
        try:
            # After commit() this only ends a transaction begun since; a no-op otherwise.
            session.rollback()
        finally:
            session.close()
