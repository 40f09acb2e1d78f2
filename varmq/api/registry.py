"""Workers by name: every worker created with ``name=`` can be found while it lives.

A name is registered when the worker starts. A stopped worker stays findable for its
``stopped_retention`` (default 60 s; 0 keeps it) and is then forgotten; starting it again
registers it again. A name held by another worker that is not stopped is refused. The one
registry of the process is :mod:`varmq.api.worker`'s (``varmq.get_worker``, ``varmq.workers``).
"""

from __future__ import annotations

import threading
import time
from typing import Generic, Protocol, TypeVar

__all__ = ["Registry", "now"]


class Named(Protocol):
    """What the registry asks of a worker."""

    @property
    def name(self) -> str: ...

    @property
    def is_stopped(self) -> bool: ...

    @property
    def _retention(self) -> float: ...

    def _stopped_for(self) -> float | None: ...


W = TypeVar("W", bound=Named)


def now() -> float:
    """The registry's clock (monotonic seconds): when a worker stopped, how long ago."""
    return time.monotonic()


class Registry(Generic[W]):
    """Workers by name. ``_lock`` guards ``_workers``."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._workers: dict[str, W] = {}

    def register(self, worker: W) -> None:
        """Register ``worker`` under its name; ``ValueError`` if a live worker holds it."""
        with self._lock:
            held = self._workers.get(worker.name)
            if held is not None and held is not worker and not held.is_stopped:
                raise ValueError(f"a running worker is already registered as {worker.name!r}")
            self._workers[worker.name] = worker

    def get(self, name: str) -> W | None:
        """The worker registered as ``name``, or ``None``."""
        with self._lock:
            worker = self._workers.get(name)
            if worker is not None and _expired(worker):
                del self._workers[name]
                return None
            return worker

    def all(self) -> dict[str, W]:
        """A snapshot of every registered worker, by name."""
        with self._lock:
            for name in [n for n, w in self._workers.items() if _expired(w)]:
                del self._workers[name]
            return dict(self._workers)


def _expired(worker: Named) -> bool:
    stopped_for = worker._stopped_for()
    retention = worker._retention
    return stopped_for is not None and retention > 0 and stopped_for >= retention
