"""Worker and web logs carry no Alembic INFO chatter at their start (DEBUG keeps it)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from orders.cli.context import setup_logging


@pytest.fixture
def restore_logging() -> Iterator[None]:
    root, alembic = logging.getLogger(), logging.getLogger("alembic")
    handlers, level, alembic_level = list(root.handlers), root.level, alembic.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        alembic.setLevel(alembic_level)


@pytest.mark.usefixtures("restore_logging")
def test_alembic_info_lines_are_hidden_at_info_and_shown_at_debug() -> None:
    setup_logging("INFO")
    assert not logging.getLogger("alembic.runtime.migration").isEnabledFor(logging.INFO)
    logging.getLogger("alembic").setLevel(logging.NOTSET)
    setup_logging("DEBUG")
    assert logging.getLogger("alembic.runtime.migration").isEnabledFor(logging.INFO)
