"""Workers by name: every worker created with ``name=`` can be found here while it lives.

A name is registered when the worker starts. A stopped worker stays findable for its
``stopped_retention`` (default 60 s; 0 keeps it) and is then forgotten; starting it again
registers it again. A name held by another worker that is not stopped is refused.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .worker import BaseWorker

    AnyWorker = BaseWorker[Any, Any, Any]

__all__ = ["get_worker", "workers"]


# Guards _workers.
_lock = threading.Lock()
_workers: dict[str, AnyWorker] = {}


def _expired(worker: AnyWorker) -> bool:
    stopped_for = worker._stopped_for()
    retention = worker._retention
    return stopped_for is not None and retention > 0 and stopped_for >= retention


def register(worker: AnyWorker) -> None:
    """Register ``worker`` under its name; ``ValueError`` if a live worker holds it."""
    with _lock:
        held = _workers.get(worker.name)
        if held is not None and held is not worker and not held.is_stopped:
            raise ValueError(f"a running worker is already registered as {worker.name!r}")
        _workers[worker.name] = worker


def get_worker(name: str) -> AnyWorker | None:
    """The worker registered as ``name``, or ``None``."""
    with _lock:
        worker = _workers.get(name)
        if worker is not None and _expired(worker):
            del _workers[name]
            return None
        return worker


def workers() -> dict[str, AnyWorker]:
    """A snapshot of every registered worker, by name."""
    with _lock:
        for name in [n for n, w in _workers.items() if _expired(w)]:
            del _workers[name]
        return dict(_workers)


def now() -> float:
    return time.monotonic()
