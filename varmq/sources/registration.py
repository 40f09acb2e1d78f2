"""A worker's records in the stores of its storage queues: :class:`WorkerRecords`.

A worker bound to a storage queue whose store keeps worker records
(:class:`~varmq.contract.protocols.IHasWorkerRegistry`) keeps one record there, whatever the
number of its queues in that store (:mod:`varmq.contract.workers` says what it holds). The record
is written by the lease renewal thread of the worker's queues in that store
(``varmq:<worker>:leases:<queue>``, :class:`~varmq.sources.leases.LeaseRenewer`): no thread of
its own and nothing per job. It is registered when the worker starts (or binds the store's
first queue while running) and refreshed every :data:`REFRESH_SECONDS`; a worker that stops
removes it (:meth:`WorkerRecords.remove_all`, on the thread that runs the worker's
``on_shutdown`` hook, before the worker counts as stopped). A process that dies leaves its
record to run out: the store shows it as gone after :data:`EXPIRES_AFTER` seconds without a
refresh, on its own clock.

A store that cannot be reached is logged as a warning once (until a write works again) and
tried again after :data:`RETRY_SECONDS`; jobs never wait on a record.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..contract.protocols import IHasWorkerRegistry, IWorkerRegistry
from ..contract.workers import EXPIRES_AFTER, REFRESH_SECONDS, encode_worker

__all__ = ["EXPIRES_AFTER", "REFRESH_SECONDS", "RETRY_SECONDS", "Counts", "WorkerRecords"]

log = logging.getLogger("varmq.worker")

RETRY_SECONDS = 1.0
"""Seconds before a registration that failed is tried again."""

Counts = Callable[[], tuple[int, int, int, int]]
"""The worker's ``(concurrency, running, completed, failed)`` now."""
Poke = Callable[[float], None]
"""Makes a queue's renewal thread look again at a monotonic time."""


@dataclass(eq=False)
class _StoreRecord:
    """The worker's record in one store, and the queues of that store it binds."""

    registry: IWorkerRegistry
    queues: list[str] = field(default_factory=list)
    pokes: list[Poke] = field(default_factory=list)
    #: When the next refresh is due (monotonic; 0: at once).
    due_at: float = 0.0
    #: Whether the store holds a record of this worker (a removal is owed at the stop).
    registered: bool = False
    warned: bool = False
    #: Held across each storage call of this record, so that they reach the store in order: a
    #: removal after the refresh under way, and no refresh after the removal.
    writing: threading.Lock = field(default_factory=threading.Lock)


class WorkerRecords:
    """The records of one worker, one per store of its storage queues (see the module).

    ``_lock`` guards ``_stores`` (id of a registry -> its :class:`_StoreRecord`), ``_active``
    and every record's ``queues``, ``pokes``, ``due_at`` and ``warned``; ``registered``
    changes under the record's ``writing`` lock. Invariant: while ``_active`` is false no
    registration starts, so once :meth:`remove_all` ran, the stores keep nothing of a stopped
    worker.
    """

    def __init__(self, name: str, counts: Counts) -> None:
        """``name``: the worker's (``""`` if none); ``counts``: see :data:`Counts`."""
        #: The worker's id in every store: one per worker object.
        self.id = uuid.uuid4().hex
        self._name = name
        self._counts = counts
        self._host = socket.gethostname()
        self._lock = threading.Lock()
        self._stores: dict[int, _StoreRecord] = {}
        self._active = False

    def bound(self, storage: Any, queue: str, poke: Poke) -> Callable[[float], float | None] | None:
        """The worker bound ``queue`` of ``storage``, whose renewal thread ``poke`` wakes: what
        that thread calls (with the monotonic time; it answers when to call again), or
        ``None`` when the store keeps no worker records. While the worker runs, the caller
        pokes the thread once it will call it."""
        if not isinstance(storage, IHasWorkerRegistry):
            return None
        try:
            registry = storage.worker_registry
        except Exception:  # an adapter that cannot say: no record, jobs run as ever
            return None
        if not isinstance(registry, IWorkerRegistry):
            return None
        with self._lock:
            record = self._stores.get(id(registry))
            if record is None:
                record = self._stores[id(registry)] = _StoreRecord(registry)
            record.queues.append(queue)
            record.pokes.append(poke)
            record.due_at = 0.0  # its queues changed: say so now

        def due(now: float) -> float | None:
            return self._due(record, now)

        return due

    @property
    def active(self) -> bool:
        """Whether the worker runs (its records are kept)."""
        with self._lock:
            return self._active

    def started(self) -> None:
        """The worker started: register in every store at once (on the renewal threads)."""
        with self._lock:
            self._active = True
            pokes = []
            for record in self._stores.values():
                record.due_at = 0.0
                pokes.append(record.pokes[0])
        for poke in pokes:
            poke(0.0)

    def stopping(self) -> bool:
        """The worker stopped: no registration starts from now on. Whether a store may hold a
        record (then :meth:`remove_all` is owed). No storage call: safe under any lock."""
        with self._lock:
            self._active = False
            return bool(self._stores)

    def remove_all(self) -> None:
        """Remove the worker's record from every store that holds one (after a registration
        under way); a store that cannot answer is logged, and its record runs out."""
        with self._lock:
            records = list(self._stores.values())
        for record in records:
            with record.writing:
                if not record.registered:
                    continue
                try:
                    record.registry.remove_worker(self.id)
                except Exception as exc:
                    log.warning(
                        "varmq: worker %s: removing its record failed (%s: %s); it shows as "
                        "gone once it runs out",
                        self._name or self.id,
                        type(exc).__name__,
                        exc,
                    )
                record.registered = False

    def _due(self, record: _StoreRecord, now: float) -> float | None:
        """Register ``record`` if due (the renewal thread); when to look again (``None``: the
        worker is stopped)."""
        with self._lock:
            if not self._active:
                return None
            if now < record.due_at:
                return record.due_at
            record.due_at = now + REFRESH_SECONDS  # claimed: another queue's thread skips it
            queues = list(record.queues)
        with record.writing:
            with self._lock:
                if not self._active:
                    return None
            concurrency, running, completed, failed = self._counts()
            data = encode_worker(
                worker_id=self.id,
                name=self._name,
                host=self._host,
                pid=os.getpid(),
                queues=queues,
                concurrency=concurrency,
                running=running,
                completed=completed,
                failed=failed,
            )
            try:
                record.registry.register_worker(self.id, data, EXPIRES_AFTER)
            except Exception as exc:
                return self._failed(record, now, exc)
            record.registered = True
        with self._lock:
            if record.warned:
                record.warned = False
                log.warning("varmq: worker %s: its record is written again", self._name or self.id)
            return record.due_at

    def _failed(self, record: _StoreRecord, now: float, exc: Exception) -> float:
        with self._lock:
            record.due_at = now + RETRY_SECONDS
            warn = not record.warned
            record.warned = True
        if warn:
            log.warning(
                "varmq: worker %s: writing its record failed (%s: %s); retrying",
                self._name or self.id,
                type(exc).__name__,
                exc,
            )
        return record.due_at
