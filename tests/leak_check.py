"""A leaked socket or file fails the test module that leaked it (a pytest plugin).

Loaded beside ``orderflow_fixtures`` by each test tree's ``conftest.py``. After
each module's last test one autouse fixture runs a full garbage collection, so
a socket or file that a test left open and that only the cyclic collector
reclaims raises its ResourceWarning inside that module's teardown: an error
there, as warnings are errors. Without it the warning came from pytest's last
collection at exit, turning a run whose tests all passed into exit status 1
without naming a test (``tests/unit/test_unclosed_resources.py`` shows both).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True, scope="module")
def unclosed_resources_fail_their_module() -> Iterator[None]:
    """After the module's last test: collect garbage, so a leak is reported here.

    A client kept alive by a reference cycle (redis-py's connections sit in
    cycles) is reclaimed only by the cyclic collector, at a time of its choosing:
    during a later, innocent test, or at exit. Once per module, not per test: a
    full collection costs about 0.2 s in a loaded test process.
    """
    yield
    gc.collect()
