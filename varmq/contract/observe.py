"""Where tracing and per-job log context plug in: one slot, empty unless an observer is installed
(:mod:`varmq.otel`'s instrumentor, or ``varmq worker --log-format json``). In the contract, so
that an adapter's own producer calls (a storage topic's ``publish``) are observed too.

Neither the core nor an adapter imports OpenTelemetry. They read :data:`OBSERVER` once per add
and once per run (one module attribute and a ``None`` check when nothing is installed) and,
when it is set:

- a producer (``add``, ``add_async``, a task's ``enqueue``, a schedule's occurrence, a topic's
  ``publish``) calls :meth:`Observer.send` before it stores the job and :meth:`Send.end` after,
  and stores :attr:`Send.carrier` (the W3C trace context, ``traceparent``/``tracestate``) with
  the job: in a storage job's envelope (its optional ``"trace"`` field), on an in-memory job;
- a runner calls :meth:`Observer.process` in the thread or task that runs the job, before the
  function (``varmq.model.tracing.begin_attempt``); :meth:`Attempt.detach` there after it
  returned; and :meth:`Attempt.end` where the run is settled
  (``varmq.model.tracing.end_attempt``), which is the runner's thread after a return, or the
  timer's thread when the job's timeout passed or a cancel came first (then the function may
  still be running).

:func:`install` and :func:`uninstall` keep several observers working together (tracing and log
context); they are called at start-up, not per job, and take :data:`_LOCK` (which guards only
the list of installed observers).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, Protocol

__all__ = [
    "OBSERVER",
    "Attempt",
    "Observer",
    "Send",
    "install",
    "installed",
    "observed_publish",
    "uninstall",
]


class Send(Protocol):
    """One producer's add or publish, observed: what to store with the job, and its end."""

    #: The trace context to store with the job (empty: store none).
    carrier: dict[str, str]

    def end(self, job_id: str | None, error: BaseException | None, stored: bool) -> None:
        """The storage answered (``stored``), or the add raised ``error``."""


class Attempt(Protocol):
    """One run of a job, observed."""

    def detach(self) -> None:
        """The function returned or raised: called in the thread (or task) that ran it."""

    def end(self, error: BaseException | None, outcome: Any) -> None:
        """The run was settled: ``error`` is what it raised (a ``JobTimeoutError`` or
        ``JobCancelledError`` when the timer settled it first), ``outcome`` what became of the
        job (a ``varmq.model.retry.Outcome``; ``None`` when settling failed)."""


class Observer(Protocol):
    """What :mod:`varmq.otel` (or the JSON log context) installs."""

    def send(self, destination: str, operation: str, job_id: str | None) -> Send:
        """A job is about to be stored in ``destination`` (a queue's label, or a topic name
        for ``operation == "publish"``)."""

    def process(
        self, destination: str, job: Any, carrier: Mapping[str, str] | None
    ) -> Attempt | None:
        """A run of ``job`` taken from ``destination`` starts, in this thread or task;
        ``carrier`` is the trace context its producer stored (``None``: none)."""


#: The installed observer (several are combined into one); ``None``: nothing observes.
OBSERVER: Observer | None = None

_LOCK = threading.Lock()
_installed: list[Observer] = []


class _Sends:
    __slots__ = ("_parts", "carrier")

    def __init__(self, parts: list[Send]) -> None:
        self._parts = parts
        self.carrier: dict[str, str] = {}
        for part in parts:
            self.carrier.update(part.carrier)

    def end(self, job_id: str | None, error: BaseException | None, stored: bool) -> None:
        for part in self._parts:
            part.end(job_id, error, stored)


class _Attempts:
    __slots__ = ("_parts",)

    def __init__(self, parts: list[Attempt]) -> None:
        self._parts = parts

    def detach(self) -> None:
        for part in reversed(self._parts):
            part.detach()

    def end(self, error: BaseException | None, outcome: Any) -> None:
        for part in self._parts:
            part.end(error, outcome)


class _Several:
    """Observers installed together, called in the order they were installed."""

    def __init__(self, observers: list[Observer]) -> None:
        self._observers = observers

    def send(self, destination: str, operation: str, job_id: str | None) -> Send:
        return _Sends([o.send(destination, operation, job_id) for o in self._observers])

    def process(
        self, destination: str, job: Any, carrier: Mapping[str, str] | None
    ) -> Attempt | None:
        parts = [o.process(destination, job, carrier) for o in self._observers]
        kept = [p for p in parts if p is not None]
        return _Attempts(kept) if kept else None


def _publish_locked() -> None:
    global OBSERVER
    if not _installed:
        OBSERVER = None
    elif len(_installed) == 1:
        OBSERVER = _installed[0]
    else:
        OBSERVER = _Several(list(_installed))


def install(observer: Observer) -> None:
    """Start calling ``observer`` (again: no change)."""
    with _LOCK:
        if observer not in _installed:
            _installed.append(observer)
            _publish_locked()


def uninstall(observer: Observer) -> None:
    """Stop calling ``observer``; runs it observes already go on to their end."""
    with _LOCK:
        if observer in _installed:
            _installed.remove(observer)
            _publish_locked()


def installed() -> tuple[Observer, ...]:
    """The observers installed, in order."""
    with _LOCK:
        return tuple(_installed)


def observed_publish(
    name: str, message_id: str | None, publish: Callable[[dict[str, str] | None], int]
) -> int:
    """Run ``publish`` (a topic's, given the trace context to store with each copy, ``None``
    for none) inside a ``"publish"`` send of the installed observer, if any (a publish costs a
    closure more than a plain call; the storage step is tens of microseconds)."""
    observer = OBSERVER
    if observer is None:
        return publish(None)
    send = observer.send(name, "publish", message_id)
    try:
        copies = publish(send.carrier or None)
    except BaseException as exc:
        send.end(message_id, exc, False)
        raise
    send.end(message_id, None, copies > 0)
    return copies
