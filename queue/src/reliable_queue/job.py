"""Value types that cross the queue API: requests, fetched jobs, leases, contexts."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from pydantic import BaseModel

from .attempts import ALWAYS, Guard
from .limits import DEFAULT_PRIORITY
from .trace_context import TraceContext

_T = TypeVar("_T")


def frozen_fast_init(cls: type[_T]) -> type[_T]:
    """Give a frozen slots dataclass an ``__init__`` that stores through its slots.

    A frozen dataclass's own ``__init__`` stores each field by
    ``object.__setattr__``, a generic attribute lookup per field: several times the
    cost of the stores themselves, paid per fetched job by the worker's per-job
    values (a 9-field context took about 1 µs to build). This one calls each slot's
    descriptor directly, with the same parameters (names, order, defaults), so
    positional and keyword calls, ``dataclasses.replace``, equality, hashing, repr
    and pickling are unchanged, and the instance stays frozen (``__setattr__``
    still raises). A ``__post_init__`` is called last, as the dataclass one does.

    Args:
        cls: a ``@dataclass(frozen=True, slots=True)`` class whose fields have no
            ``default_factory`` and whose non-init fields no default.

    Returns:
        ``cls`` itself, its ``__init__`` replaced.

    Raises:
        TypeError: ``cls`` is not a frozen slots dataclass, or has a field as above.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or not params.frozen or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a frozen slots dataclass")
    names: dict[str, Any] = {"_post": getattr(cls, "__post_init__", None)}
    args, body = [], []
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        _check_field(cls, f)
        if not f.init:
            continue
        names[f"_set_{f.name}"] = cls.__dict__[f.name].__set__
        if f.default is dataclasses.MISSING:
            args.append(f.name)
        else:
            names[f"_default_{f.name}"] = f.default
            args.append(f"{f.name}=_default_{f.name}")
        body.append(f"    _set_{f.name}(self, {f.name})\n")
    if names["_post"] is not None:
        body.append("    _post(self)\n")
    if not body:
        body.append("    pass\n")
    source = f"def __init__(self, {', '.join(args)}):\n" + "".join(body)
    exec(source, names)  # noqa: S102 - the source is made here from field names only
    init = names["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[misc,method-assign]
    return cls


@dataclass(frozen=True, slots=True)
class EnqueueRequest:
    """One job to enqueue.

    Attributes:
        task: registered task name.
        payload: a JSON-serialisable dict or a pydantic model instance.
        idempotency_key: a duplicate enqueue within the window returns the first job's id.
        delay: seconds from now (Redis server clock) before the job may run.
        run_at: absolute epoch seconds before which the job may not run (wins over delay).
        max_attempts: total runs allowed; None takes the task policy or queue default.
        priority: 0..9, lower runs sooner (``DEFAULT_PRIORITY``, 5, when not given; ADR
            0033); a job keeps it on every route back to waiting.
        fairness_key: within one priority, jobs of different keys are served in turn,
            so one key's backlog cannot hold the others back (text, 1..128 bytes of
            UTF-8, no NUL; None: the jobs without a key share one lane; ADR 0033).
        trace_context: the context the job is created in (its order's, say): a queue
            with a tracer records a producer span as its child and stores that span's
            context in the record; without one this context is stored as it is. None:
            the current span's context, when a queue with a tracer has one.
    """

    task: str
    payload: dict[str, Any] | BaseModel
    idempotency_key: str | None = None
    delay: float = 0.0
    run_at: float | None = None
    max_attempts: int | None = None
    priority: int = DEFAULT_PRIORITY
    fairness_key: str | None = None
    trace_context: TraceContext | None = None


def slots_factory(cls: type[_T]) -> Callable[..., _T]:
    """A fast maker of ``cls`` instances, for the worker's per-job hot path.

    Calling a class with a Python ``__init__`` costs more than the stores it makes,
    and a frozen instance's stores are calls of their own, even through its slot
    descriptors (:func:`frozen_fast_init`). The maker allocates the instance and
    fills its slots by plain attribute stores; for a frozen class it fills a plain
    twin with the same slots and then gives it ``cls`` as its class. Either way the
    result is a genuine instance of ``cls``, equal to one made by ``cls(...)``, and
    a frozen one is frozen from then on. It takes the init fields in order (as
    ``cls`` does) and calls ``__post_init__`` last.

    Args:
        cls: a ``@dataclass(slots=True)`` class (frozen or not) whose fields have
            no ``default_factory`` and whose non-init fields no default.

    Returns:
        ``make(*init_fields) -> cls``.

    Raises:
        TypeError: ``cls`` is not a slots dataclass, or has a field as above.
    """
    params = getattr(cls, "__dataclass_params__", None)
    if params is None or "__slots__" not in cls.__dict__:
        raise TypeError(f"{cls.__name__} is not a slots dataclass")
    names: dict[str, Any] = {"_new": object.__new__, "_cls": cls}
    if params.frozen:
        slots = cls.__dict__["__slots__"]
        names["_twin"] = type(f"_{cls.__name__}Making", (), {"__slots__": slots})
    names["_post"] = getattr(cls, "__post_init__", None)
    args, body = [], [f"    o = _new({'_twin' if params.frozen else '_cls'})\n"]
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        _check_field(cls, f)
        if not f.init:
            continue
        if f.default is dataclasses.MISSING:
            args.append(f.name)
        else:
            names[f"_default_{f.name}"] = f.default
            args.append(f"{f.name}=_default_{f.name}")
        body.append(f"    o.{f.name} = {f.name}\n")
    if params.frozen:
        body.append("    o.__class__ = _cls\n")
    if names["_post"] is not None:
        body.append("    _post(o)\n")
    body.append("    return o\n")
    exec(f"def make({', '.join(args)}):\n" + "".join(body), names)  # noqa: S102 - made here
    make: Callable[..., _T] = names["make"]
    make.__qualname__ = make.__name__ = f"make_{cls.__name__}"
    return make


def _check_field(cls: type, f: dataclasses.Field[Any]) -> None:
    """Refuse a field the generated code would not set as the dataclass does."""
    if f.default_factory is not dataclasses.MISSING:
        raise TypeError(f"{cls.__name__}.{f.name} has a default factory")
    if not f.init and f.default is not dataclasses.MISSING:
        raise TypeError(f"{cls.__name__}.{f.name} is a non-init field with a default")


@frozen_fast_init
@dataclass(frozen=True, slots=True)
class Lease:
    """Proof that a worker holds a job: its id and the lease token of this delivery."""

    job_id: str
    token: str


@frozen_fast_init
@dataclass(frozen=True, slots=True)
class RawJob:
    """A fetched job before decoding: what the fetch script returned.

    Attributes:
        queue: queue name.
        job_id: job id.
        token: lease token of this delivery, ``"<seq>:<worker id>"``.
        attempt: 1-based number of this delivery.
        record: the stored record bytes (may be garbage if a foreign producer wrote it).
        lease: the lease to present on ack / nack / extend (derived from ``job_id`` and
            ``token``; built once, since the worker reads it several times per job).
    """

    queue: str
    job_id: str
    token: str
    attempt: int
    record: bytes
    lease: Lease = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _SET_LEASE(self, make_lease(self.job_id, self.token))


make_lease = slots_factory(Lease)
_SET_LEASE = RawJob.__dict__["lease"].__set__  # frozen: stored through its slot
#: ``make_raw_job(queue, job_id, token, attempt, record)``: a :class:`RawJob`, made
#: fast (:func:`slots_factory`), for the fetch's per-job path.
make_raw_job = slots_factory(RawJob)


@frozen_fast_init
@dataclass(frozen=True, slots=True)
class JobContext:
    """What a handler may know about the job it runs.

    Attributes:
        job_id: job id.
        queue: queue name.
        task: task name.
        attempt: 1-based delivery number.
        max_attempts: total runs allowed.
        lease_token: the opaque lease token of this delivery.
        fencing_token: the monotonic number inside the lease token; larger means a
            later delivery, so an application can refuse a write from an older one.
        enqueued_at: producer wall-clock time of the enqueue, epoch seconds.
        idempotency_key: the key given at enqueue, or None.
        guard: this delivery's attempt guard (:meth:`hold_lease`); a context made
            outside a worker gets one that always allows. Not compared, hashed or
            shown.
    """

    job_id: str
    queue: str
    task: str
    attempt: int
    max_attempts: int
    lease_token: str
    fencing_token: int
    enqueued_at: float
    idempotency_key: str | None
    guard: Guard = field(default=ALWAYS, compare=False, repr=False)

    def hold_lease(self) -> Guard:
        """``with ctx.hold_lease():`` runs its block only while this attempt holds its lease.

        Returns:
            A context manager. On entry it raises
            :class:`~reliable_queue.errors.AttemptLost` when the attempt was timed
            out or abandoned, its lease was refused an extend, or the lease's local
            deadline is within a quarter lease of passing; while the block runs the
            time-limit check does not time the attempt out, and once it completed
            the attempt is not timed out afterwards (``reliable_queue.attempts``).
            Commit an attempt's effects inside it.
        """
        return self.guard


#: ``make_context(*fields)``: a :class:`JobContext`, made fast (:func:`slots_factory`).
make_context = slots_factory(JobContext)


@dataclass(frozen=True, slots=True)
class FetchResult:
    """Result of one fetch call.

    Attributes:
        jobs: leased jobs, at most the count asked for.
        wait_seconds: when ``jobs`` is empty, seconds until the next delayed job is due
            or the next lease expires (None if neither exists).
        reaped: expired leases reclaimed by this call.
        reap_more: True if reaping hit ``reap_limit`` and more expired leases remain.
        suspect_waiting: True if nothing was leased because the head of the line is a
            suspect that this fetch could not lease (it was not ``alone``, ADR 0021).
        paused: True if nothing was leased because jobs wait but the queue is paused
            (ADR 0031).
        rate_limited: True if nothing was leased because jobs wait but the queue's rate
            limit allows none now; ``wait_seconds`` is then at most the seconds until its
            window reopens (ADR 0032).
        capped: True if nothing was leased because every waiting job the fetch looked at
            belongs to a fairness key at its cap (ADR 0033); a settlement that frees a
            slot wakes the queue's idle workers.
    """

    jobs: list[RawJob]
    wait_seconds: float | None
    reaped: int
    reap_more: bool
    suspect_waiting: bool = False
    paused: bool = False
    rate_limited: bool = False
    capped: bool = False


@dataclass(frozen=True, slots=True)
class AckResult:
    """Which acks were recorded and which were refused as stale."""

    acked: list[str]
    refused: list[str]
