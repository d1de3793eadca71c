"""The default worker (batch size, lanes) is named once and read everywhere."""

from __future__ import annotations

import inspect

from orders.cli.worker import worker
from orders.worker import defaults
from orders.worker.runner import build_worker, run_worker


def test_the_cli_and_the_runner_take_the_default_batch_size_from_one_setting():
    cli = inspect.signature(worker).parameters
    assert cli["batch_size"].default == defaults.BATCH_SIZE
    assert cli["concurrency"].default == defaults.CONCURRENCY
    for function in (run_worker, build_worker):
        assert inspect.signature(function).parameters["batch_size"].default == defaults.BATCH_SIZE
