"""Which SQLite libraries orderflow runs on, and the line that says why not."""

from __future__ import annotations

import sqlite3

from orders.app.db import SQLITE_MIN_VERSION, sqlite_problem


def test_a_library_with_returning_and_json_is_fine():
    assert sqlite_problem((3, 35, 0), True) is None
    assert sqlite_problem((3, 46, 1), True) is None


def test_a_library_before_returning_is_named_with_the_version_needed():
    assert sqlite_problem((3, 34, 1), True) == (
        "SQLite 3.34.1 is too old: orderflow needs 3.35.0 or newer"
    )


def test_a_library_without_json_functions_is_named():
    assert sqlite_problem((3, 40, 1), False) == (
        "SQLite 3.40.1 was built without its JSON functions (json_each)"
    )


def test_this_python_links_a_library_orderflow_runs_on():
    assert sqlite3.sqlite_version_info >= SQLITE_MIN_VERSION
