"""``orders tokens``: named API tokens with roles (create, list, revoke)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from orders.cli.context import emit_json, fail, handle_errors, make_app
from orders.cli.render import console, fitted_table, say, when

tokens = typer.Typer(
    help="Named API tokens with roles (viewer, placer, operator, admin): create, list, revoke.",
    no_args_is_help=True,
)


@tokens.command()
@handle_errors
def create(
    name: Annotated[str, typer.Argument(help="The token's name (1-64 letters, digits, _.-).")],
    role: Annotated[
        str, typer.Option("--role", help="viewer, placer, operator or admin.", show_default=False)
    ],
) -> None:
    """Create token NAME with ROLE and print it: once, alone on the last line (only its
    SHA-256 is stored). Names are never reused. Exit 2 for a malformed name, an unknown
    role or a name in use."""
    from orders.app.audit import Action, os_actor, record
    from orders.app.tokens import TokenError, check_name, check_role, create_token
    from workflows.uow import UnitOfWork

    try:
        check_name(name)
        check_role(role)
    except TokenError as exc:
        fail(str(exc), code=2)
    app = make_app(uses_redis=False)
    try:
        with UnitOfWork(app.session_factory) as uow:
            try:
                text = create_token(uow.session, name, role)
            except TokenError as exc:
                fail(str(exc), code=2)
                return
            record(
                uow.session, os_actor(), Action.TOKEN_CREATE, {"name": name, "role": role}, count=1
            )
            uow.commit()
    finally:
        app.close()
    say("created token {} (role {}); it is shown once, on the next line:", name, role)
    sys.stdout.write(text + "\n")


@tokens.command("list")
@handle_errors
def list_(as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False) -> None:
    """List the tokens: name, role, created, revoked (never the token itself)."""
    from orders.app.tokens import list_tokens

    app = make_app(uses_redis=False)
    try:
        with app.session_factory() as session:
            rows = list_tokens(session)
    finally:
        app.close()
    if as_json:
        emit_json(
            [
                {
                    "name": r.name,
                    "role": r.role,
                    "created_at": r.created_at.isoformat(),
                    "revoked_at": r.revoked_at.isoformat() if r.revoked_at else None,
                }
                for r in rows
            ]
        )
        return
    table = fitted_table(
        ["name", "role", "created (UTC)", "revoked (UTC)"],
        [[r.name, r.role, when(r.created_at), when(r.revoked_at)] for r in rows],
        flex=0,
        title=f"tokens ({len(rows)})",
    )
    console.print(table)


@tokens.command()
@handle_errors
def revoke(name: Annotated[str, typer.Argument(help="The token's name.")]) -> None:
    """Revoke token NAME: refused from now on (a server that checked it within the last
    second may still accept it for that second). Revoking again changes nothing; exit 1
    for an unknown name."""
    from orders.app.audit import Action, os_actor, record
    from orders.app.tokens import revoke_token
    from workflows.uow import UnitOfWork

    app = make_app(uses_redis=False)
    try:
        with UnitOfWork(app.session_factory) as uow:
            revoked = revoke_token(uow.session, name)
            if revoked:
                record(uow.session, os_actor(), Action.TOKEN_REVOKE, {"name": name}, count=1)
            uow.commit()
    finally:
        app.close()
    say("revoked token {}" if revoked else "token {} was already revoked", name)
