"""A socket left to the garbage collector fails the module that leaked it, not the exit.

``pytest -k "cluster or failover or partition"`` once reported every test passed
and exited 1: a Redis socket a test never closed sat in a reference cycle until
pytest's last collection at exit, where a ResourceWarning (an error here) names
no test. The ``leak_check`` plugin now collects garbage after each module. These
tests run a small pytest session in a subprocess, with the project's warning
policy, on a planted leak (the collector is turned off in the planted module,
so only the explicit collections run, as deterministically as can be).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

TESTS_DIR = Path(__file__).resolve().parents[1]

LEAKY = """
import gc
import socket

gc.disable()  # only explicit collections: the leak surfaces where one runs


class Cycle:
    def __init__(self):
        self.me = self  # freed by the cyclic collector alone, like a redis-py connection
        self.sock = socket.socket()


def test_leaves_a_socket_open():
    Cycle()


def test_after_the_leak():
    pass
"""

CLEAN = """
import socket


def test_closes_its_socket():
    with socket.socket():
        pass
"""


@pytest.fixture
def session(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("PYTHONPATH", str(TESTS_DIR))  # where the leak_check plugin lives
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # a bare, quick session
    pytester.makepyfile(test_leaky=LEAKY, test_clean=CLEAN)
    return pytester


def _run(session: pytest.Pytester, *args: str) -> pytest.RunResult:
    return session.runpytest_subprocess("-p", "no:cacheprovider", "-W", "error", *args)


def test_without_the_fixture_a_leak_passes_every_test_and_exits_1(session: pytest.Pytester) -> None:
    result = _run(session, "test_leaky.py")
    result.assert_outcomes(passed=2)
    assert result.ret == 1
    assert "unclosed <socket.socket" in result.stdout.str() + result.stderr.str()


def test_with_the_fixture_the_leak_is_an_error_of_its_module(session: pytest.Pytester) -> None:
    result = _run(session, "-p", "leak_check", "test_leaky.py", "test_clean.py")
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines(["ERROR test_leaky.py::test_after_the_leak*"])
    assert "unclosed <socket.socket" in result.stdout.str()


def test_a_module_that_closes_what_it_opens_exits_0(session: pytest.Pytester) -> None:
    result = _run(session, "-p", "leak_check", "test_clean.py")
    result.assert_outcomes(passed=1)
    assert result.ret == 0
