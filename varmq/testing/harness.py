"""How the conformance suite reaches a storage: a harness that opens queues and moves time.

:class:`StorageHarness` is what the suite needs; :class:`QueuesHarness` is that harness for any
store shaped like ``sqliteq.Queues``, ``redisq.Queues`` and the reference ``MemoryStorage``: an
object whose ``new_queue``, ``new_priority_queue``, ``new_distributed_queue`` and
``new_distributed_priority_queue`` open queues by name with keyword options, and whose
``close()`` closes them. :class:`FakeWallClock` is the test clock those two adapters take.
Needs nothing but the standard library (pytest is needed by the suite, not here).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from varmq.testing.storage import FakeClock

__all__ = ["FakeWallClock", "Outage", "QueueKind", "QueuesHarness", "StorageHarness"]


@dataclass(frozen=True)
class QueueKind:
    """One of the four kinds of queue a storage offers; ``str()`` is its ``new_*`` suffix."""

    priority: bool
    distributed: bool

    def __str__(self) -> str:
        return ("distributed_" if self.distributed else "") + (
            "priority_queue" if self.priority else "queue"
        )


class StorageHarness(Protocol):
    """What a storage gives the suite: queues, passing time, and cleanup."""

    def new_queue(self, name: str, *, priority: bool, distributed: bool, **options: Any) -> Any:
        """Open queue ``name`` of the given kind; the same name twice shares the jobs.

        ``options`` are the store's queue options: always ``visibility_timeout``, and for a
        storage that claims ``IDeadLetterable`` also ``dead_letter_limit`` and
        ``dead_letter_max_age``. The validation tests pass bad values and unknown names here
        and expect the store's own errors to come through.
        """
        ...

    def advance(self, seconds: float) -> None:
        """Let ``seconds`` of lease time pass (fake clock, or a real sleep)."""
        ...

    def close(self) -> None:
        """Close everything this harness opened."""
        ...


Outage = Callable[[], AbstractContextManager[None]]
"""Makes the storage unable to answer for the time of a ``with`` block (a stopped server, a
file locked by another process); the outage tests of the suite use it when the harness has
one, as an ``outage`` attribute. A ``disconnect`` attribute of the same shape takes the
connection of live topic subscribers away for the block (a killed client connection, a
restarted server), for the reconnection test of ``ILiveTopics``."""


class QueuesHarness:
    """The harness of a store with the four ``new_*`` openers; the suite's tests call these.

    ``open_queues()`` returns the store a queue is opened on, and is called once for every
    queue: return one store to share one connection, or a new one each time to give every
    queue object a connection of its own, as separate processes would have. ``advance`` moves
    the clock the store measures leases and delays with. :meth:`close` closes every store
    ``open_queues`` returned, each once. ``outage``, when given, is what the suite uses to take
    the storage away, and ``disconnect`` the connection of live topic subscribers (see
    :data:`Outage`).
    """

    def __init__(
        self,
        open_queues: Callable[[], Any],
        advance: Callable[[float], None],
        outage: Outage | None = None,
        disconnect: Outage | None = None,
    ) -> None:
        self._open_queues = open_queues
        self._advance = advance
        self.outage = outage
        self.disconnect = disconnect
        self._opened: dict[int, Any] = {}  # id -> store, in order of first use

    def queues(self) -> Any:
        """A store from ``open_queues``, closed with the harness (for store-level tests)."""
        store = self._open_queues()
        self._opened.setdefault(id(store), store)
        return store

    def new_queue(self, name: str, *, priority: bool, distributed: bool, **options: Any) -> Any:
        """Open ``name`` with the store's ``new_<kind>`` method, passing ``options`` on."""
        opener = getattr(self.queues(), f"new_{QueueKind(priority, distributed)}")
        return opener(name, **options)

    def advance(self, seconds: float) -> None:
        """Move the store's clock ``seconds`` forward."""
        self._advance(seconds)

    def close(self) -> None:
        """Close every store opened through this harness."""
        opened, self._opened = list(self._opened.values()), {}
        for store in opened:
            store.close()


class FakeWallClock(FakeClock):
    """A :class:`FakeClock` read as Unix time in integer milliseconds.

    The ``clock=`` that ``sqliteq.new`` and ``redisq.new`` take. It starts at the real time (or
    at ``start_ms``), so that ``dead_at`` and similar readings look like real dates; ``advance``
    takes seconds, like the harness's.
    """

    def __init__(self, start_ms: int | None = None) -> None:
        start_ms = time.time_ns() // 1_000_000 if start_ms is None else start_ms
        super().__init__(start_ms / 1000)

    def __call__(self) -> int:
        return round(super().__call__() * 1000)
