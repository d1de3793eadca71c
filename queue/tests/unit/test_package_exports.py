"""``import reliable_queue`` stays cheap: the dead-letter view, the inspection reads, the
consumer spans and process isolation are imported when first used, and every exported
name still resolves to its module's object."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import reliable_queue

#: Modules a worker serving jobs needs none of at start (a process pays CPU for each).
ON_FIRST_USE = (
    "reliable_queue.attempt_tracing",
    "reliable_queue.dlq",
    "reliable_queue.inspection",
    "reliable_queue.isolation",
    "multiprocessing",
)


def test_importing_the_package_and_its_worker_leaves_the_rarely_used_modules_out() -> None:
    code = (
        "import sys\n"
        "import reliable_queue\n"
        "from reliable_queue import Queue, Worker, WorkerHooks, audit\n"
        f"print([m for m in {ON_FIRST_USE!r} if m in sys.modules])"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_every_exported_name_resolves_to_the_object_of_its_module() -> None:
    lazy = reliable_queue._ON_FIRST_USE
    for name in reliable_queue.__all__:
        value = getattr(reliable_queue, name)
        if name in lazy:
            module = importlib.import_module(f"reliable_queue.{lazy[name]}")
            assert value is getattr(module, name)
    assert callable(reliable_queue.audit)  # the function, never the module of that name


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_name"):
        reliable_queue.no_such_name  # noqa: B018
