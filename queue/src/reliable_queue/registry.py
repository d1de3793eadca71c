"""Task registry: task name -> handler, payload model and retry policy."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from .errors import PayloadValidationError, UnknownTaskError
from .job import JobContext
from .policy import RetryPolicy

Handler = Callable[[Any, JobContext], Any]
#: A batch handler takes ``[(payload, ctx), ...]`` and returns one entry per item:
#: None for success, or the exception that item failed with.
BatchHandler = Callable[[list[tuple[Any, JobContext]]], list[BaseException | None]]

#: Where a task's handler runs: a thread of the worker (the default), or a child
#: process of its lane that is killed at the run's time limit (``reliable_queue.isolation``).
ISOLATIONS = ("thread", "process")


@dataclass(frozen=True)
class TaskDefinition:
    """One registered task.

    Attributes:
        name: task name, as stored in job records.
        handler: ``handler(payload, ctx) -> Any``; payload is an instance of ``model``
            (or the raw JSON value when ``model`` is None).
        model: pydantic model checked at enqueue and again at fetch.
        retry: retry policy for ordinary exceptions.
        batch: when True, ``handler`` is a :data:`BatchHandler` called once with
            every job of this task in a fetched batch (e.g. to handle them in one
            database transaction); its middleware must be
            :class:`~reliable_queue.middleware.BatchMiddleware`, which sees every job.
        isolation: ``"thread"`` (default): the handler runs in a lane's thread, which
            a time limit abandons but cannot stop. ``"process"``: each handler call
            (single or batch) runs in a child process of the lane, killed at the
            run's time limit; the worker then needs ``isolated_registry``, a factory
            the child builds its own registry with (``reliable_queue.isolation``).
            The worker's middleware still runs in the worker, around the call.

    Raises:
        ValueError: ``isolation`` is neither ``"thread"`` nor ``"process"``.
    """

    name: str
    handler: Handler | BatchHandler
    model: type[BaseModel] | None
    retry: RetryPolicy
    batch: bool = False
    isolation: str = "thread"

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATIONS:
            raise ValueError(
                f"task {self.name!r}: isolation must be one of {ISOLATIONS}, not {self.isolation!r}"
            )

    def validate(self, payload: Any) -> Any:
        """Parse a JSON payload into the task's model.

        Raises:
            pydantic.ValidationError: the payload does not fit the model.
        """
        if self.model is None:
            return payload
        if isinstance(payload, self.model):
            return payload
        return self.model.model_validate(payload)


class TaskRegistry:
    """Maps task names to :class:`TaskDefinition`; shared by producers and workers."""

    def __init__(self) -> None:
        self._tasks: dict[str, TaskDefinition] = {}

    def task(
        self,
        name: str,
        *,
        model: type[BaseModel] | None = None,
        retry: RetryPolicy | None = None,
        batch: bool = False,
        isolation: str = "thread",
    ) -> Callable[[Any], Any]:
        """Decorator registering ``handler(payload, ctx)`` under ``name``
        (or, with ``batch=True``, ``handler([(payload, ctx), ...]) -> [error | None]``;
        ``isolation`` as in :class:`TaskDefinition`).

        Raises:
            ValueError: if ``name`` is already registered, or ``isolation`` is unknown.
        """
        if isolation not in ISOLATIONS:  # at decoration time, before any handler is given
            raise ValueError(f"task {name!r}: isolation must be one of {ISOLATIONS}")

        def register(handler: Any) -> Any:
            self.add(TaskDefinition(name, handler, model, retry or RetryPolicy(), batch, isolation))
            return handler

        return register

    def add(self, definition: TaskDefinition) -> None:
        """Register a definition. Raises ValueError on a duplicate name."""
        if definition.name in self._tasks:
            raise ValueError(f"task {definition.name!r} is already registered")
        self._tasks[definition.name] = definition

    def get(self, name: str) -> TaskDefinition:
        """The definition of ``name``. Raises :class:`UnknownTaskError` if absent."""
        try:
            return self._tasks[name]
        except KeyError:
            raise UnknownTaskError(f"unknown task {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._tasks

    def __iter__(self) -> Iterator[TaskDefinition]:
        return iter(self._tasks.values())

    def payload_for_enqueue(self, name: str, payload: Any) -> Any:
        """Validate ``payload`` for task ``name`` and return its JSON-ready form.

        Raises:
            UnknownTaskError: the task is not registered.
            PayloadValidationError: the payload does not fit the task's model.
        """
        definition = self.get(name)
        try:
            value = definition.validate(payload)
        except ValidationError as exc:
            raise PayloadValidationError(f"payload for task {name!r} is invalid: {exc}") from exc
        return value.model_dump(mode="json") if isinstance(value, BaseModel) else value
