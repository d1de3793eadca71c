"""Process isolation of a task: its handler calls run in a child process of the lane.

A lane keeps one persistent child (a fresh interpreter, never a fork of the worker),
which builds its own registry with a zero-argument factory the worker names
(``Worker(isolated_registry="package.module:function")``). Payloads, contexts and
errors cross one socket as JSON frames; the child's ``ctx.hold_lease()`` asks the lane,
which answers from the delivery's real guard. The lane kills the child (SIGKILL) at
the run's time limit, never while a hold is in progress (bounded by one lease), and
starts a new one. Why, and what it costs: docs/adr/0026-process-isolation-per-task.md.
"""

from .factory import load_factory
from .parent import CallResult, ChildProcess, Finished, Killed, Lost
from .run import IsolatedRun, run_isolated

__all__ = [
    "CallResult",
    "ChildProcess",
    "Finished",
    "IsolatedRun",
    "Killed",
    "Lost",
    "load_factory",
    "run_isolated",
]
