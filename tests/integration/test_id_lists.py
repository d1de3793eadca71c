"""An id-list condition keeps one SQL text on PostgreSQL and selects the same rows everywhere."""

from __future__ import annotations

from sqlalchemy import create_engine, insert, select
from sqlalchemy.orm import Session

from workflows.columns import utcnow
from workflows.idlists import among
from workflows.models import Workflow


def test_the_postgresql_text_does_not_grow_with_the_list():
    """Regression: ``IN`` rendered a parameter per id, so psycopg re-parsed every
    statement over more than 50 ids (a fifth of a worker's CPU)."""
    engine = create_engine("postgresql+psycopg://nobody@127.0.0.1:1/none")  # never connects
    with Session(engine) as session:
        texts = {
            str(
                select(Workflow.id)
                .where(among(session, Workflow.id, range(n)))
                .compile(engine, compile_kwargs={"render_postcompile": True})
            )
            for n in (1, 3, 150, 1000)
        }
    engine.dispose()
    assert len(texts) == 1
    assert "= ANY (" in texts.pop()


def test_among_selects_exactly_the_listed_rows(session_factory):
    now = utcnow()
    with session_factory() as session:
        ids = session.scalars(
            insert(Workflow).returning(Workflow.id, sort_by_parameter_order=True),
            [
                {"kind": "k", "subject_id": i, "status": "running", "version": 1}
                | {"created_at": now, "updated_at": now}
                for i in range(80)
            ],
        ).all()
        wanted = ids[::3]
        for chosen in ([], wanted[:1], wanted):
            got = session.scalars(
                select(Workflow.id).where(among(session, Workflow.id, iter(chosen)))
            ).all()
            assert sorted(got) == sorted(chosen)
