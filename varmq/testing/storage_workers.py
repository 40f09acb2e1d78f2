"""The reference storage's worker records: :class:`ReferenceWorkerRegistry`.

``MemoryStorage`` keeps one registry, the ``worker_registry`` of every queue it opens
(:class:`~varmq.contract.protocols.IWorkerRegistry`, "Workers seen from anywhere"), and lists it
as ``MemoryStorage.workers()``. Times are the storage's clock, read as Unix seconds, so a test
that moves the clock sees records run out; a record gone for
:data:`~varmq.contract.workers.GONE_KEPT` seconds is dropped by the next call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from varmq.contract.protocols import StoredWorkerRecord
from varmq.contract.rules import as_bytes
from varmq.contract.workers import GONE_KEPT

__all__ = ["ReferenceWorkerRegistry"]


@dataclass
class _Entry:
    record: bytes
    started_at: float
    last_seen: float
    expires_at: float


class ReferenceWorkerRegistry:
    """Worker records in memory, on the storage's clock (``wall``: Unix seconds).

    ``_lock`` guards ``_entries`` (worker id -> its record and times).
    """

    def __init__(self, wall: Callable[[], float]) -> None:
        self._wall = wall
        self._lock = threading.Lock()
        self._entries: dict[str, _Entry] = {}

    def register_worker(self, worker_id: str, record: bytes, expires_after: float) -> None:
        """Store or replace the record of ``worker_id``, seen now."""
        data = as_bytes("memory storage: register_worker", record)
        now = self._wall()
        with self._lock:
            self._prune_locked(now)
            entry = self._entries.get(worker_id)
            started = now if entry is None else entry.started_at
            self._entries[str(worker_id)] = _Entry(data, started, now, now + expires_after)

    def remove_worker(self, worker_id: str) -> bool:
        """Delete the record of ``worker_id``; whether there was one."""
        with self._lock:
            return self._entries.pop(worker_id, None) is not None

    def worker_records(self) -> list[StoredWorkerRecord]:
        """Every record kept, living or gone for less than ``GONE_KEPT`` seconds."""
        now = self._wall()
        with self._lock:
            self._prune_locked(now)
            return [
                StoredWorkerRecord(
                    id=worker_id,
                    record=entry.record,
                    started_at=entry.started_at,
                    last_seen=entry.last_seen,
                    alive=entry.expires_at > now,
                )
                for worker_id, entry in self._entries.items()
            ]

    def _prune_locked(self, now: float) -> None:
        gone = [k for k, e in self._entries.items() if e.expires_at + GONE_KEPT <= now]
        for worker_id in gone:
            del self._entries[worker_id]
