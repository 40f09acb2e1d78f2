"""The progress of one storage queue's running jobs, written to its storage a few times a second
at most: :class:`ProgressWrites`.

A job function may call ``job.set_progress`` in a tight loop; the storage must not see each
call. So a call only keeps the value in the job's :class:`JobProgressSlot` and, unless a write
of that job is already planned, plans one: at once when the job's last write is
:data:`MIN_INTERVAL` old, else when it will be. The writes are made by the queue's renewal thread
(``varmq:<worker>:leases:<queue>``, :class:`~varmq.sources.leases.LeaseRenewer`), which wakes
for them as it wakes to renew leases and send held acknowledgements: no thread per job, no
storage call in the job's thread or on an event loop, and a storage that hangs delays only this
queue's renewals, as it would anyway. The worker's timer thread is not used: it acts under the
dispatcher's lock and makes no storage call. So a job's storage sees at most one write per
:data:`MIN_INTERVAL` (four a second), each carrying the latest value, and the last value is
written within :data:`MIN_INTERVAL` of being set. When the job is settled, a value not written
yet is written first, in the settling thread (:meth:`ProgressWrites.flush`, before the
acknowledgement), so the ended record keeps the last value.

Each write is fenced by the job's lease (``IJobProgress.set_progress``): a ``False`` (lease lost,
or the job has no record) ends the job's writes. A storage error is logged as a warning once
until a write works again, and never reaches the job.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from ..model.progress import add_sink
from ..model.records import encode_progress
from .leases import StorageJob

__all__ = ["MIN_INTERVAL", "JobProgressSlot", "ProgressWrites"]

log = logging.getLogger("varmq.worker")

MIN_INTERVAL = 0.25
"""Seconds between two progress writes of one job: at most four a second."""


class JobProgressSlot:
    """One running job's progress on its way to the storage (the job's writer)."""

    __slots__ = ("closed", "due", "job", "next_at", "pending", "writes", "writing")

    def __init__(self, writes: ProgressWrites, job: StorageJob) -> None:
        self.writes = writes
        self.job = job
        #: The value set and not written yet, as (fraction, message).
        self.pending: tuple[float, str | None] | None = None
        #: When its planned write is due (monotonic); inf: none is planned.
        self.due = math.inf
        #: When its next write may go: its last write plus MIN_INTERVAL.
        self.next_at = 0.0
        #: Set once no more writes go: the job was settled, or the storage refused one.
        self.closed = False
        #: Held while one of its values is written, so that a settle's flush comes after a
        #: write under way (and the values reach the storage in the order they were set).
        self.writing = threading.Lock()

    def set(self, fraction: float, message: str | None) -> None:
        """Keep the value; plan its write unless one is planned (the job's thread, any call)."""
        self.writes.keep(self, (fraction, message))


class ProgressWrites:
    """The progress writes of one storage queue's running jobs (see the module's docstring).

    ``storage`` implements ``IJobProgress``; ``holds(job)`` says whether ``job`` is a job of
    this queue taken and not settled; ``poke(due)`` makes the renewal thread call
    :meth:`send_due` at ``due`` (monotonic) or soon after. ``_lock`` guards ``_slots`` (id of the
    job -> its slot: the jobs that set progress and were not settled) and every slot's
    ``pending``, ``due``, ``next_at`` and ``closed``; ``_warned`` (a warning was logged and no
    write worked since) changes under it too.
    """

    def __init__(
        self,
        storage: Any,
        *,
        label: str,
        holds: Callable[[StorageJob], bool],
        poke: Callable[[float], None],
    ) -> None:
        self._write = storage.set_progress
        self._label = label
        self._holds = holds
        self._poke = poke
        self._lock = threading.Lock()
        self._slots: dict[int, JobProgressSlot] = {}
        self._warned = False
        add_sink(self)

    # -- the job's side ---------------------------------------------------------------------

    def progress_writer(self, job: Any) -> JobProgressSlot | None:
        """The slot of ``job`` if it is a job of this queue taken and not settled; made on the
        first call (``varmq.model.progress.writer_of``)."""
        if not isinstance(job, StorageJob) or not self._holds(job):
            return None
        with self._lock:
            slot = self._slots.get(id(job))
            if slot is None or slot.job is not job:
                slot = self._slots[id(job)] = JobProgressSlot(self, job)
        return slot

    def keep(self, slot: JobProgressSlot, value: tuple[float, str | None]) -> None:
        """``value`` is the job's latest progress: write it when the job's next write may go."""
        with self._lock:
            if slot.closed:
                return
            slot.pending = value
            if slot.due != math.inf:
                return  # a write is planned: it takes the latest value
            slot.due = due = max(time.monotonic(), slot.next_at)
        self._poke(due)

    # -- the renewal thread's side ----------------------------------------------------------

    def send_due(self, now: float) -> float | None:
        """Write the progress of the jobs whose write is due at ``now``; when the next planned
        one is due (``None``: none is planned)."""
        if not self._slots:
            return None
        with self._lock:
            due = [slot for slot in self._slots.values() if slot.due <= now]
        for slot in due:
            self._send(slot)
        with self._lock:
            planned = min((slot.due for slot in self._slots.values()), default=math.inf)
        return None if planned == math.inf else planned

    def _send(self, slot: JobProgressSlot) -> None:
        with slot.writing:
            with self._lock:
                value, slot.pending, slot.due = slot.pending, None, math.inf
                if value is None or slot.closed:
                    return
                slot.next_at = time.monotonic() + MIN_INTERVAL
            self._store(slot, value)

    def _store(self, slot: JobProgressSlot, value: tuple[float, str | None]) -> None:
        """One write of ``value``; a refusal closes the slot, an error is logged (once)."""
        job = slot.job
        try:
            stored = bool(self._write(job.ack_id, encode_progress(*value)))
        except Exception as exc:
            with self._lock:
                warn, self._warned = not self._warned, True
            if warn:
                log.warning(
                    "varmq: the progress of job %r of queue %r could not be stored (%s: %s); "
                    "progress writes go on, the job is not affected, and this is logged once "
                    "until one works",
                    job.id,
                    self._label,
                    type(exc).__name__,
                    exc,
                )
            return
        with self._lock:
            self._warned = False
            if not stored:
                # The lease is gone (the job is another consumer's now) or the job has no
                # record: nothing it sets can be stored.
                slot.closed = True
                slot.due = math.inf
                if self._slots.get(id(job)) is slot:
                    del self._slots[id(job)]

    # -- the settle's side ------------------------------------------------------------------

    def unsent(self, job: StorageJob) -> bool:
        """Whether ``job`` set progress that :meth:`flush` must see to (no lock, no I/O)."""
        return id(job) in self._slots

    def flush(self, job: StorageJob) -> None:
        """``job`` is being settled: write its progress not written yet, in this thread, and
        no more after that. Called before its settle's storage call."""
        if not self._slots:
            return
        with self._lock:
            slot = self._slots.get(id(job))
            if slot is None or slot.job is not job:
                return
            del self._slots[id(job)]
        with slot.writing:  # after a write under way
            with self._lock:
                value, slot.pending, slot.due, slot.closed = slot.pending, None, math.inf, True
            if value is not None:
                self._store(slot, value)
