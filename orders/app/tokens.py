"""Named API tokens: create (the text is shown once), list, revoke, and find the caller
of a request by its bearer token.

A token is ``of_`` followed by 43 URL-safe characters (32 random bytes from
``secrets``); only its SHA-256 is stored, looked up through a unique index. A name
is never reused, revoked or not. ``ORDERS_WEB_TOKEN``, when set, is an admin token
named ``env:ORDERS_WEB_TOKEN`` that lives in no table. Reasoning:
docs/adr/0039-the-front-door-tokens-and-idempotency.md.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from orders.domain.access import MAX_NAME_CHARS, ApiToken, Role
from orders.domain.errors import OrdersError
from workflows.columns import utcnow

PREFIX = "of_"
"""Every token this module makes starts with it (a secret scanner can spot one)."""
ENV_TOKEN_NAME = "env:ORDERS_WEB_TOKEN"
"""The caller name of the ``ORDERS_WEB_TOKEN`` admin token."""
NAME = re.compile(rf"^[A-Za-z0-9][A-Za-z0-9_.\-]{{0,{MAX_NAME_CHARS - 1}}}$")


class TokenError(OrdersError):
    """A token command cannot be done (bad usage: the message says why)."""


class TokenNameTaken(TokenError):
    """A token of that name exists, or existed (names are never reused)."""


class TokenNotFound(TokenError):
    """No token of that name."""


@dataclass(frozen=True)
class Caller:
    """Who sent a request, as its token says.

    Attributes:
        name: the token's name (``env:ORDERS_WEB_TOKEN`` for the configured one).
        role: a :class:`~orders.domain.access.Role` value.
    """

    name: str
    role: str


@dataclass(frozen=True)
class TokenInfo:
    """One token as ``orders tokens list`` shows it (never its text or hash)."""

    name: str
    role: str
    created_at: datetime
    revoked_at: datetime | None


def hash_token(text: str) -> str:
    """The SHA-256 of a token's text, as 64 hex digits (what the table stores).

    Args:
        text: the token as the client sends it.
    """
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def check_name(name: str) -> None:
    """Refuse a name that is not 1-64 letters, digits or ``_.-`` (starting with a
    letter or digit).

    Raises:
        TokenError: the name is malformed (the message says the rule).
    """
    if not NAME.match(name):
        raise TokenError(
            f"token name {name!r} is malformed: 1-{MAX_NAME_CHARS} letters, digits or _.- "
            "starting with a letter or digit"
        )


def check_role(role: str) -> None:
    """Refuse a role that is not one of :attr:`Role.ALL`.

    Raises:
        TokenError: unknown role.
    """
    if role not in Role.ALL:
        raise TokenError(f"unknown role {role!r}; choose from {', '.join(Role.ALL)}")


def create_token(
    session: Session,
    name: str,
    role: str,
    *,
    clock: Callable[[], datetime] = utcnow,
    make: Callable[[], str] = lambda: PREFIX + secrets.token_urlsafe(32),
) -> str:
    """Add a token in the caller's transaction and return its text (never stored).

    Args:
        session: the caller's session (it commits).
        name: the token's name (see :func:`check_name`).
        role: its role.
        clock: current time (timezone-aware).
        make: makes the token text (tests hand in their own).

    Returns:
        The token text: shown once, then only its hash remains.

    Raises:
        TokenError: a malformed name or an unknown role.
        TokenNameTaken: the name is (or was) in use; nothing written.
    """
    check_name(name)
    check_role(role)
    if session.scalar(select(ApiToken.id).where(ApiToken.name == name)) is not None:
        raise TokenNameTaken(f"a token named {name!r} exists or existed; names are never reused")
    text = make()
    session.add(ApiToken(name=name, role=role, token_hash=hash_token(text), created_at=clock()))
    try:
        session.flush()
    except IntegrityError as exc:  # a concurrent create of the same name
        raise TokenNameTaken(f"a token named {name!r} exists") from exc
    return text


def list_tokens(session: Session) -> list[TokenInfo]:
    """Every token, oldest first, revoked ones included."""
    rows = session.scalars(select(ApiToken).order_by(ApiToken.id)).all()
    return [TokenInfo(r.name, r.role, r.created_at, r.revoked_at) for r in rows]


def revoke_token(session: Session, name: str, *, clock: Callable[[], datetime] = utcnow) -> bool:
    """Revoke the token ``name`` in the caller's transaction.

    Returns:
        True when revoked now; False when it was revoked before (nothing changed).

    Raises:
        TokenNotFound: no token of that name.
    """
    row = session.scalar(select(ApiToken).where(ApiToken.name == name))
    if row is None:
        raise TokenNotFound(f"no token named {name!r} (`orders tokens list` shows them)")
    if row.revoked_at is not None:
        return False
    row.revoked_at = clock()
    session.flush()
    return True


def find_caller(session: Session, text: str, env_token: str | None = None) -> Caller | None:
    """The caller a bearer token names, or None (unknown, revoked, empty).

    Args:
        session: a session (only read).
        text: the token as sent.
        env_token: the configured ``ORDERS_WEB_TOKEN`` (an admin token), or None.
    """
    if not text:
        return None
    if env_token is not None and hmac.compare_digest(text.encode(), env_token.encode()):
        return Caller(ENV_TOKEN_NAME, Role.ADMIN)
    row = session.execute(
        select(ApiToken.name, ApiToken.role, ApiToken.revoked_at).where(
            ApiToken.token_hash == hash_token(text)
        )
    ).one_or_none()
    if row is None or row.revoked_at is not None:
        return None
    return Caller(row.name, row.role)
