"""Acknowledgements of one storage queue: group commit, and one acknowledgement per take.

A storage queue that acknowledges many ids in one call (``acknowledge_many``, or
``acknowledge_with_results`` on a queue that keeps a result worker's values) gets its
acknowledgements through :class:`Acknowledgements`. Two things decide when a call is made:

- **Group commit without making anyone wait.** A finished job's ack id joins the pending
  batch; the first thread that finds no call under way sends every pending id, batch after
  batch, until none is left, and the others go straight on to their next job.
- **One acknowledgement per take** (:class:`Take`). The jobs of one take usually finish close
  together. Sent at once, the first of them to finish would go alone and the rest in a second
  call: two storage writes per take where one does. So while a job's take still has jobs this
  process has not settled, and the take is younger than the hold (:data:`ACK_HOLD`, or a tenth
  of the lease if that is shorter), its ack waits in the batch. The job of the take that
  settles last sends the batch; when the hold runs out first (a slow job in the take), the
  queue's renewal thread sends it (:meth:`Acknowledgements.send_held`). A held ack is pending
  like any other: a worker stops only once it was sent, and a process that dies before that
  runs the job again, as it would after any ack that was not sent yet.

A storage that acknowledges one id per call (``acknowledge``) gets each call at once, and so
does a job whose take is older than the hold: holding back buys nothing when the other jobs of
the take are slow.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Any

from .contract.protocols import IAcknowledgeable
from .errors import AcknowledgeJobError
from .sources import Report

if TYPE_CHECKING:
    from .storage_source import StorageJob

__all__ = ["ACK_HOLD", "Acknowledgements", "Take"]

#: Seconds after its take that an acknowledgement may wait for the other jobs of that take.
ACK_HOLD = 0.002


class Take:
    """The jobs of one take that this process has not settled yet, and until when the
    acknowledgements of the settled ones may wait for them (this process's monotonic clock)."""

    __slots__ = ("hold_until", "left")

    def __init__(self, left: int, hold_until: float) -> None:
        self.left = left
        self.hold_until = hold_until


class Acknowledgements:
    """Acknowledgements of one storage queue (see the module's docstring).

    ``batched``: the storage has ``acknowledge_many``. ``results`` (a result worker on a queue
    with job records): every acknowledgement carries its job's result bytes (``job.result``),
    through ``acknowledge_with_results``. ``on_hold(at)`` is called when an acknowledgement
    starts to wait: :meth:`send_held` must then run at ``at`` (or soon after). ``on_settled``
    is called after acknowledgements that were counted in :attr:`unacked` were sent.
    """

    def __init__(
        self,
        storage: Any,
        *,
        batched: bool,
        report: Report,
        on_settled: Callable[[], None],
        on_hold: Callable[[float], None],
        results: bool = False,
    ) -> None:
        self._storage = storage
        self._results = results
        #: Whether acknowledgements go in batches (then the jobs of a take may wait together).
        self.batched = batched or results  # acknowledge_with_results takes batches
        self._report = report
        self._on_settled = on_settled
        self._on_hold = on_hold
        self._acked = isinstance(storage, IAcknowledgeable)
        # Guards _pending, _flushing, _held_until, unacked and the Take of every job.
        self._lock = threading.Lock()
        self._pending: list[StorageJob] = []
        self._flushing = False
        # When the earliest held acknowledgement must be sent; inf: none is held.
        self._held_until = math.inf
        #: Acknowledgements not sent yet (a worker stops once this is 0).
        self.unacked = 0

    # -- a job leaves this process ------------------------------------------------------------

    def send(self, job: StorageJob) -> None:
        """Acknowledge ``job`` (now, or with the rest of its take); failures are reported as
        :class:`AcknowledgeJobError`."""
        if not job.ack_id or not self._acked:
            self.leave(job)
        elif not self.batched:
            self._settle_one(job)  # one id per call: no take waits (see take_of)
        elif self._join(job):
            self._flush_pending()

    def send_soon(self, job: StorageJob, executor: Executor) -> None:
        """Like :meth:`send`, but a call it has to make runs on ``executor``: never blocks."""
        if not job.ack_id or not self._acked:
            self.leave(job, flush=False)
            return
        if not self.batched:
            with self._lock:
                self.unacked += 1
            executor.submit(self._settle_one, job, True)
        elif self._join(job):
            executor.submit(self._flush_pending)

    def leave(self, job: StorageJob, *, flush: bool = True) -> None:
        """``job`` was settled some other way (retried, dead-lettered, failed, given back,
        lost): its take has one job fewer to wait for. With ``flush``, acknowledgements that
        waited for it are sent now, in this thread; without, by their hold's end."""
        with self._lock:
            if not (self._left_locked(job) and flush and self._pending and not self._flushing):
                return
            self._flushing = True
        self._flush_pending()

    def send_held(self, now: float) -> float | None:
        """Send the held acknowledgements whose hold ran out by ``now``; when to look again
        (``None``: none is held)."""
        with self._lock:
            if self._held_until == math.inf:
                return None
            if now < self._held_until:
                return self._held_until
            if self._flushing:  # the call under way sends them too
                self._held_until = math.inf
                return None
            self._flushing = True
        self._flush_pending()
        return None

    # -- inside ------------------------------------------------------------------------------

    @staticmethod
    def _left_locked(job: StorageJob) -> bool:
        """Count ``job`` out of its take, once; whether that was the take's last job."""
        take = job.take
        if take is None:
            return False
        job.take = None
        take.left -= 1
        return take.left <= 0

    def _join(self, job: StorageJob) -> bool:
        """Add ``job`` to the pending batch; ``True`` if the caller must send the batch."""
        with self._lock:
            take = job.take
            last = self._left_locked(job)
            self._pending.append(job)
            self.unacked += 1
            if self._flushing:
                return False  # the call under way sends it next
            if take is None or last or time.monotonic() >= take.hold_until:
                self._flushing = True
                return True
            if take.hold_until >= self._held_until:
                return False  # an earlier hold's end sends it too
            self._held_until = take.hold_until
        self._on_hold(take.hold_until)  # outside the lock: it wakes another thread
        return False

    def _settle_one(self, job: StorageJob, counted: bool = False) -> None:
        try:
            outcome: bool | BaseException = bool(self._storage.acknowledge(job.ack_id))
        except Exception as exc:
            outcome = exc
        self._check(job, outcome)
        if counted:
            with self._lock:
                self.unacked -= 1
            self._on_settled()

    def _flush_pending(self) -> None:
        while True:
            with self._lock:
                batch, self._pending = self._pending, []
                self._held_until = math.inf  # whatever was held goes in this batch
                if not batch:
                    self._flushing = False
                    break
            self._flush(batch)
            with self._lock:
                self.unacked -= len(batch)
        self._on_settled()

    def _flush(self, batch: list[StorageJob]) -> None:
        try:
            if self._results:
                answers = self._storage.acknowledge_with_results(
                    [(j.ack_id, j.result) for j in batch]
                )
            else:
                answers = self._storage.acknowledge_many([j.ack_id for j in batch])
            results: list[bool | BaseException] = [bool(r) for r in answers]
            if len(results) != len(batch):
                raise RuntimeError(
                    f"acknowledge_many returned {len(results)} results for {len(batch)} ids"
                )
        except Exception as exc:
            results = [exc] * len(batch)
        for job, outcome in zip(batch, results, strict=True):
            self._check(job, outcome)

    def _check(self, job: StorageJob, outcome: bool | BaseException) -> None:
        if outcome is True:
            return
        cause = outcome if isinstance(outcome, BaseException) else None
        self._report(AcknowledgeJobError(job.id, job.ack_id, cause))


def take_of(jobs: Sequence[StorageJob], taken_at: float, lease: float) -> None:
    """Make ``jobs`` (taken together at ``taken_at``, under a lease of ``lease`` seconds) one
    :class:`Take`, so that their acknowledgements go in one call."""
    if len(jobs) < 2 or lease <= 0:
        return  # a lone job has nobody to wait for
    take = Take(len(jobs), taken_at + min(ACK_HOLD, lease / 10))
    for job in jobs:
        job.take = take
