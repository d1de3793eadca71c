"""Is the database at the newest migration? One query, and no Alembic import.

Every process that opens the database checks its schema revision first. Alembic
answers that by importing itself and every revision file (a quarter of a worker's
start-up CPU), so the usual case is answered here: the head is read from the
``revision`` / ``down_revision`` lines of ``migrations/versions/*.py`` and compared
with ``alembic_version``. Anything this reading does not understand (a branch, a
merge, a file without those lines) or a database not at that head answers "not
known", and the caller goes the Alembic way (``orders.app.migrate``), which
migrates or refuses as before.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

__all__ = ["VERSIONS_DIR", "at_head", "read_head", "script_head"]

VERSIONS_DIR = Path(__file__).resolve().parents[2] / "migrations" / "versions"

_REVISION = re.compile(r"""^revision(?:\s*:[^=\n]*)?\s*=\s*["']([^"'\n]+)["']\s*$""", re.M)
_DOWN = re.compile(r"""^down_revision(?:\s*:[^=\n]*)?\s*=\s*(.+?)\s*$""", re.M)
_QUOTED = re.compile(r"""^["']([^"']+)["']$""")


@cache
def script_head() -> str | None:
    """:func:`read_head` of orderflow's own history (read once per process)."""
    return read_head(VERSIONS_DIR)


def read_head(versions_dir: Path) -> str | None:
    """The head revision of the history in ``versions_dir``, read from its files' text.

    Args:
        versions_dir: the folder of revision files (``*.py``).

    Returns:
        The one revision no other revision names as its ``down_revision``; None when
        the files do not say it plainly (no files, a file without one quoted
        ``revision``, a ``down_revision`` that is not None or one quoted id, two
        heads): then ask Alembic.
    """
    revisions: set[str] = set()
    parents: set[str] = set()
    files = sorted(versions_dir.glob("*.py"))
    for path in files:
        source = path.read_text(encoding="utf-8")
        revision, down = _REVISION.findall(source), _DOWN.findall(source)
        if len(revision) != 1 or len(down) != 1:
            return None
        revisions.add(revision[0])
        if down[0] != "None":
            parent = _QUOTED.match(down[0])
            if parent is None:
                return None  # a merge (a tuple) or something computed
            parents.add(parent.group(1))
    heads = revisions - parents
    if len(revisions) != len(files) or len(heads) != 1 or not parents <= revisions:
        return None
    return heads.pop()


def at_head(engine: Engine) -> bool:
    """True when the database of ``engine`` is known to be at the newest migration:
    its ``alembic_version`` table holds exactly :func:`script_head` (one query).

    Returns:
        False when that is not known: no readable head, no such table, another
        revision, or a database that cannot be reached (the caller's Alembic check
        then says which, as it always did).
    """
    head = script_head()
    if head is None:
        return False
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT version_num FROM alembic_version")).all()
    except SQLAlchemyError:
        return False
    return [row[0] for row in rows] == [head]
