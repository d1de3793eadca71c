"""The operator audit log: one ``operator_actions`` row per action from the CLI, the
dashboard or the API, and reading it back.

:func:`record` writes in the caller's transaction (a cancellation commits its row
with its effect); :func:`record_now` commits a row of its own, right after an action
whose effect lives in Redis (redrive, purge, pause, resume, limit, cap, rebind). Targets
are JSON of filters and ids: never a token or a URL with its password (masked).
Reasoning: docs/adr/0040-one-audit-row-per-operator-action.md.
"""

from __future__ import annotations

import getpass
import json
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from orders.domain.access import OperatorAction
from orders.observability.urls import mask_urls_in
from workflows.columns import utcnow
from workflows.uow import SessionFactory, UnitOfWork

MAX_TARGET_CHARS = 8000
"""Longest target text kept (a bulk action's id list is cut, with a note)."""
MAX_RESULT_CHARS = 1000
"""Longest result text kept."""


class Action:
    """Values of ``operator_actions.action``."""

    REDRIVE = "redrive"
    PURGE = "purge"
    CANCEL = "cancel"
    PAUSE = "pause"
    RESUME = "resume"
    LIMIT = "limit"
    CAP = "cap"
    REBIND = "rebind"
    TOKEN_CREATE = "token_create"
    TOKEN_REVOKE = "token_revoke"

    ALL = (
        REDRIVE,
        PURGE,
        CANCEL,
        PAUSE,
        RESUME,
        LIMIT,
        CAP,
        REBIND,
        TOKEN_CREATE,
        TOKEN_REVOKE,
    )


@dataclass(frozen=True)
class Actor:
    """Who acts, from where.

    Attributes:
        name: a token's name, ``env:ORDERS_WEB_TOKEN`` or ``os:<user>@<host>``.
        source: ``cli``, ``web`` or ``api``.
        request_id: the HTTP request's id; None from the CLI.
    """

    name: str
    source: str
    request_id: str | None = None


def os_actor() -> Actor:
    """The CLI's actor: ``os:<user>@<host>`` of whoever runs the command."""
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for the uid (a container)
        user = "?"
    return Actor(f"os:{user}@{socket.gethostname()}"[:200], "cli")


def _target_text(target: Mapping[str, Any]) -> str:
    text = mask_urls_in(json.dumps(dict(target), sort_keys=True, default=str))
    if len(text) > MAX_TARGET_CHARS:
        return json.dumps({"cut": True, "start": text[: MAX_TARGET_CHARS - 100]})
    return text


def record(
    session: Session,
    actor: Actor,
    action: str,
    target: Mapping[str, Any],
    *,
    count: int,
    result: str = "ok",
    dry_run: bool = False,
    clock: Callable[[], datetime] = utcnow,
) -> None:
    """Add one audit row in the caller's transaction (the caller commits).

    Args:
        session: the caller's session.
        actor: who acts.
        action: an :class:`Action` value.
        target: the filter or the ids (JSON-able; stored as sorted JSON, at most
            :data:`MAX_TARGET_CHARS` characters, credentials in URLs masked).
        count: how many it acted on (or would, for a dry run).
        result: ``ok``, or ``refused: ...`` / ``failed: ...``.
        dry_run: it only listed what it would do.
        clock: current time (timezone-aware).

    Raises:
        ValueError: ``action`` is not an :class:`Action` value.
    """
    if action not in Action.ALL:
        raise ValueError(f"unknown audit action {action!r}")
    session.add(
        OperatorAction(
            at=clock(),
            actor=actor.name[:200],
            source=actor.source[:10],
            action=action,
            target=_target_text(target),
            dry_run=dry_run,
            count=count,
            result=mask_urls_in(result)[:MAX_RESULT_CHARS],
            request_id=actor.request_id[:64] if actor.request_id else None,
        )
    )


def record_now(
    session_factory: SessionFactory,
    actor: Actor,
    action: str,
    target: Mapping[str, Any],
    *,
    count: int,
    result: str = "ok",
    dry_run: bool = False,
    clock: Callable[[], datetime] = utcnow,
) -> None:
    """:func:`record` in a transaction of its own, committed before it returns.

    Raises:
        sqlalchemy.exc.SQLAlchemyError: the database failed (the action itself is done).
    """
    with UnitOfWork(session_factory) as uow:
        record(
            uow.session,
            actor,
            action,
            target,
            count=count,
            result=result,
            dry_run=dry_run,
            clock=clock,
        )
        uow.commit()


@dataclass(frozen=True)
class AuditRow:
    """One audit row as ``orders audit`` and the pages show it."""

    id: int
    at: datetime
    actor: str
    source: str
    action: str
    target: Any
    dry_run: bool
    count: int
    result: str
    request_id: str | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready (the time as ISO 8601)."""
        return {**self.__dict__, "at": self.at.isoformat()}


def recent_actions(
    session: Session, *, limit: int = 50, before_id: int | None = None
) -> list[AuditRow]:
    """The newest audit rows, newest first (primary-key order, no scan).

    Args:
        session: a session (only read).
        limit: rows wanted (>= 1).
        before_id: only rows older than this id (the next page's cursor).
    """
    query = select(OperatorAction).order_by(OperatorAction.id.desc()).limit(limit)
    if before_id is not None:
        query = query.where(OperatorAction.id < before_id)
    rows = session.scalars(query).all()
    out = []
    for r in rows:
        try:
            target = json.loads(r.target)
        except ValueError:
            target = r.target
        out.append(
            AuditRow(
                r.id,
                r.at,
                r.actor,
                r.source,
                r.action,
                target,
                r.dry_run,
                r.count,
                r.result,
                r.request_id,
            )
        )
    return out
