"""Who may use the HTTP API and what they did: named tokens with roles, the record of
each order placed over HTTP (with its idempotency key), and the operator audit log.

A token is stored only as the SHA-256 of its text; a name is never reused, so an
order's ``placed_by`` names one token for good. An ``operator_actions`` row never
holds a secret: who, what, on which filter or ids, dry run or not, how many, the
result. Reasoning: docs/adr/0039-the-front-door-tokens-and-idempotency.md and
docs/adr/0040-one-audit-row-per-operator-action.md.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import Boolean, ForeignKey, Index, Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from workflows.columns import UTCDateTime
from workflows.models import Base

MAX_NAME_CHARS = 64
"""Longest token name (characters)."""
MAX_KEY_CHARS = 255
"""Longest ``Idempotency-Key`` header value (characters)."""


class Role:
    """Roles of an API token; what each may do is :data:`PERMISSIONS`.

    viewer: read everything; placer: place orders and read its own (a shop);
    operator: read, cancel, redrive, pause / resume, limit; admin: all of it, and
    purge, rebind, tokens.
    """

    VIEWER = "viewer"
    PLACER = "placer"
    OPERATOR = "operator"
    ADMIN = "admin"

    ALL = (VIEWER, PLACER, OPERATOR, ADMIN)


class Permission:
    """What a route needs (one word per kind of request)."""

    READ = "read"  # every order and job, searches, the audit log
    READ_OWN = "read_own"  # the orders this token placed
    PLACE = "place"
    OPERATE = "operate"  # cancel, redrive, pause, resume, limit, cap
    ADMINISTER = "administer"  # purge, rebind, tokens


PERMISSIONS: dict[str, frozenset[str]] = {
    Role.VIEWER: frozenset({Permission.READ, Permission.READ_OWN}),
    Role.PLACER: frozenset({Permission.READ_OWN, Permission.PLACE}),
    Role.OPERATOR: frozenset({Permission.READ, Permission.READ_OWN, Permission.OPERATE}),
    Role.ADMIN: frozenset(
        {
            Permission.READ,
            Permission.READ_OWN,
            Permission.PLACE,
            Permission.OPERATE,
            Permission.ADMINISTER,
        }
    ),
}
"""Role -> the permissions it holds."""


def allows(role: str, permission: str) -> bool:
    """Whether ``role`` holds ``permission`` (an unknown role holds nothing).

    Args:
        role: a :class:`Role` value.
        permission: a :class:`Permission` value.
    """
    return permission in PERMISSIONS.get(role, frozenset())


class ApiToken(Base):
    """A named API token: its role and the SHA-256 (hex) of its text, never the text.

    ``revoked_at`` set: refused from then on; the row stays so the name is never
    given to another token.
    """

    __tablename__ = "api_tokens"
    __table_args__ = (
        Index("uq_api_tokens_name", "name", unique=True),
        Index("uq_api_tokens_token_hash", "token_hash", unique=True),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(MAX_NAME_CHARS))
    role: Mapped[str] = mapped_column(String(20))
    token_hash: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())
    revoked_at: Mapped[datetime | None] = mapped_column(UTCDateTime())


class ApiOrder(Base):
    """An order placed over HTTP: which token placed it and, while its window lasts, the
    request's ``Idempotency-Key`` with the body's fingerprint and the first response.

    Written in the order's own transaction. ``(placed_by, idempotency_key)`` is unique,
    so a key placed twice fails the second transaction; a key past its window is set
    to NULL (with its response) and may be used again.
    """

    __tablename__ = "api_orders"
    __table_args__ = (
        Index(
            "uq_api_orders_placed_by_idempotency_key", "placed_by", "idempotency_key", unique=True
        ),
        Index("ix_api_orders_created_at", "created_at"),
    )

    order_id: Mapped[int] = mapped_column(
        ForeignKey("orders.id"), primary_key=True, autoincrement=False
    )
    placed_by: Mapped[str] = mapped_column(String(MAX_NAME_CHARS))
    idempotency_key: Mapped[str | None] = mapped_column(String(MAX_KEY_CHARS))
    fingerprint: Mapped[str | None] = mapped_column(String(64))
    response_status: Mapped[int | None] = mapped_column(Integer)
    response_body: Mapped[str | None] = mapped_column(Text)
    priority: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime())


class OperatorAction(Base):
    """One operator action from the CLI, the dashboard or the API.

    Attributes:
        actor: the token's name, ``env:ORDERS_WEB_TOKEN``, or ``os:<user>@<host>``.
        source: ``cli``, ``web`` or ``api``.
        action: ``redrive``, ``purge``, ``cancel``, ``pause``, ``resume``, ``limit``,
            ``rebind``, ``token_create``, ``token_revoke``.
        target: JSON text: the filter or the ids acted on (never a secret).
        dry_run: only listed what it would do.
        count: how many it acted on (or would).
        result: ``ok``, or ``refused: ...`` / ``failed: ...`` with the reason.
        request_id: the HTTP request's id (``X-Request-ID``); None from the CLI.
    """

    __tablename__ = "operator_actions"
    __table_args__ = (Index("ix_operator_actions_at", "at"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    at: Mapped[datetime] = mapped_column(UTCDateTime())
    actor: Mapped[str] = mapped_column(String(200))
    source: Mapped[str] = mapped_column(String(10))
    action: Mapped[str] = mapped_column(String(30))
    target: Mapped[str] = mapped_column(Text)
    dry_run: Mapped[bool] = mapped_column(Boolean, default=False)
    count: Mapped[int] = mapped_column(Integer, default=0)
    result: Mapped[str] = mapped_column(Text)
    request_id: Mapped[str | None] = mapped_column(String(64))
