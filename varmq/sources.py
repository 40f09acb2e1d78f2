"""A bound queue as the worker sees it: how to take jobs from it and how to finish them.

:class:`MemorySource` wraps storage that holds the worker's own job objects (the in-memory
queues, or a user's ``IQueue``). :class:`StorageSource` wraps persistent and distributed
storage that holds JSON envelopes: it takes in batches, keeps taken jobs it could not start
yet, backs off after errors, and acknowledges after the job ran.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any

from . import envelope
from .errors import AcknowledgeJobError, FailedToCastJobError, FailedToDequeueError, ParseJobError
from .job import EnqueuedJob, Job
from .protocols import (
    IAcknowledgeable,
    IBatchAcknowledgeable,
    ICountedDelivery,
    IDeadLetterable,
    IDelayedEnqueue,
    ILeaseExtendable,
    IMultiAcknowledgeable,
    INackable,
    IQueueStats,
)
from .shelf import MemoryShelf

__all__ = ["MemorySource", "Source", "StorageJob", "StorageSource"]

Report = Callable[[BaseException], None]
Decode = Callable[[Any], Any]


def _nothing() -> None:
    return None


# Back-off after a failed take starts here and doubles up to the poll interval.
_FIRST_BACKOFF = 0.01


class StorageJob(Job[Any]):
    """A job taken from storage: it carries its lease (ack id) and where it came from."""

    __slots__ = ("ack_id", "renew_at", "source")

    def __init__(
        self, job_id: str, data: Any, attempt: int, ack_id: str, source: StorageSource
    ) -> None:
        super().__init__(job_id, data, attempt)
        self.ack_id = ack_id
        self.source = source
        self.renew_at = 0.0


class Source:
    """Common part of every bound queue: its storage, label and bind rank."""

    def __init__(self, storage: Any, label: str, rank: int, index: int) -> None:
        self.storage = storage
        self.label = label
        self.rank = rank
        self.index = index

    def has_work(self) -> bool:
        raise NotImplementedError

    def length(self) -> int:
        raise NotImplementedError

    def waiting(self) -> int:
        """Jobs waiting to start: in storage, plus taken and not yet started."""
        return self.length()

    def usable(self, now: float) -> bool:
        return True


class MemorySource(Source):
    """A queue holding the worker's job objects; taking is cheap, done under the worker lock."""

    def __init__(
        self,
        storage: Any,
        label: str,
        rank: int,
        index: int,
        report: Report,
        prioritised: bool,
    ) -> None:
        super().__init__(storage, label, rank, index)
        self._report = report
        self.prioritised = prioritised
        self.shelf = MemoryShelf()
        #: Jobs taken from this queue and not finished (guarded by the scheduler lock).
        self.running = 0

    def has_work(self) -> bool:
        return len(self.storage) > 0

    def length(self) -> int:
        return len(self.storage)

    def waiting(self) -> int:
        return len(self.storage) + self.shelf.delayed()

    def offer(self, job: EnqueuedJob[Any]) -> bool:
        """Put ``job`` in line in the storage, with its priority when the queue has them."""
        if self.prioritised:
            return bool(self.storage.enqueue(job, job._priority))
        return bool(self.storage.enqueue(job))

    def promote_due(self, now: float) -> int:
        """Move delayed jobs that are due into the queue; how many were moved."""
        moved = 0
        for job in self.shelf.pop_due(now):
            if self.offer(job):
                moved += 1
            else:
                # The queue was closed or filled up meanwhile: the job cannot wait any longer.
                with contextlib.suppress(Exception):
                    job._cancel()
        return moved

    def stats(self) -> dict[str, float]:
        return {
            "waiting": len(self.storage),
            "in_flight": self.running,
            "delayed": self.shelf.delayed(),
            "dead": self.shelf.dead(),
            "oldest_age": 0.0,
        }

    def take(self, decode: Decode | None) -> Job[Any] | None:
        """Take the next runnable job, skipping cancelled ones; ``None`` when empty."""
        while True:
            item = self.storage.dequeue()
            if item is None:
                return None
            if isinstance(item, EnqueuedJob):
                if item._claim():
                    item._origin = self
                    self.running += 1
                    return item
                continue
            if isinstance(item, bytes | bytearray | str):
                try:
                    job_id, data = envelope.decode(item)
                    return Job(job_id, decode(data) if decode else data)
                except Exception as exc:
                    self._report(ParseJobError(self.label, "", str(exc)))
                    continue
            self._report(FailedToCastJobError(self.label, item))


class StorageSource(Source):
    """A persistent or distributed queue: batch takes, leases, acknowledgement."""

    def __init__(
        self,
        storage: Any,
        label: str,
        rank: int,
        index: int,
        report: Report,
        poll: float,
        poison_limit: int = 5,
    ) -> None:
        super().__init__(storage, label, rank, index)
        self._report = report
        self._poll = poll
        self.poison_limit = poison_limit
        self.prioritised = False
        self.buffer: deque[StorageJob] = deque()
        # Storage is assumed to hold jobs until a take finds it empty.
        self.maybe_ready = True
        self.taking = False
        self.empty_since = 0.0
        self.retry_at = 0.0
        self._backoff = 0.0
        self.counted = isinstance(storage, ICountedDelivery)
        self.batched = isinstance(storage, IBatchAcknowledgeable)
        self.acked = isinstance(storage, IAcknowledgeable)
        self.leased = isinstance(storage, ILeaseExtendable)
        self.nackable = isinstance(storage, INackable)
        self.buries = isinstance(storage, IDeadLetterable)
        self.delays = isinstance(storage, IDelayedEnqueue)
        self._multi_ack = isinstance(storage, IMultiAcknowledgeable)
        #: Jobs taken from this queue and not finished (guarded by the scheduler lock).
        self.running = 0
        #: Monotonic time at which a job this process delayed or gave back becomes due
        #: (0: none); the timer makes the source takeable again then, without a poll.
        self.wake_at = 0.0
        # Guards _ack_queue, _flushing and unacked: the pending batch of acknowledgements
        # and whether a thread is sending batches now (see ack()).
        self._ack_lock = threading.Lock()
        self._ack_queue: list[StorageJob] = []
        self._flushing = False
        self.unacked = 0
        #: Called after a flush emptied the pending batch (set by the scheduler).
        self.on_settled: Callable[[], None] = _nothing

    # -- selection ----------------------------------------------------------------------

    def has_work(self) -> bool:
        return bool(self.buffer) or (self.maybe_ready and not self.taking)

    def usable(self, now: float) -> bool:
        return bool(self.buffer) or self.retry_at <= now

    def length(self) -> int:
        try:
            return len(self.storage) + len(self.buffer)
        except Exception:
            return len(self.buffer)

    def lease_seconds(self) -> float:
        if not self.leased:
            return 0.0
        try:
            return float(self.storage.lease_seconds)
        except Exception:
            return 0.0

    # -- taking -------------------------------------------------------------------------

    def take(self, n: int, decode: Decode | None) -> tuple[int, list[StorageJob]]:
        """Take up to ``n`` jobs: ``(how many the storage handed out, the decoded jobs)``.

        A storage error starts a back-off (``retry_at``), is reported, and gives ``(0, [])``.
        """
        try:
            deliveries = self._take_raw(n)
        except Exception as exc:
            self._fail(exc)
            return 0, []
        self._backoff = 0.0
        self.retry_at = 0.0
        jobs: list[StorageJob] = []
        for item, ack_id, attempt in deliveries:
            job = self._decode(item, ack_id, attempt, decode)
            if job is not None:
                jobs.append(job)
        return len(deliveries), jobs

    def _take_raw(self, n: int) -> Sequence[tuple[Any, str, int]]:
        storage = self.storage
        if self.counted:
            return [(i, a, int(n_)) for i, a, n_ in storage.dequeue_batch_with_attempts(n)]
        if self.batched:
            return [(i, a, 1) for i, a in storage.dequeue_batch_with_ack_ids(n)]
        if self.acked:
            got = storage.dequeue_with_ack_id()
            return [] if got is None else [(got[0], got[1], 1)]
        item = storage.dequeue()
        return [] if item is None else [(item, "", 1)]

    def _fail(self, exc: BaseException) -> None:
        self._backoff = min(max(self._backoff * 2, _FIRST_BACKOFF), self._poll)
        self.retry_at = time.monotonic() + self._backoff
        self._report(FailedToDequeueError(self.label, exc))

    def _decode(
        self, item: Any, ack_id: str, attempt: int, decode: Decode | None
    ) -> StorageJob | None:
        if not isinstance(item, bytes | bytearray | memoryview | str):
            self._report(FailedToCastJobError(self.label, item))
            return None
        try:
            job_id, data = envelope.decode(item)
            if decode is not None:
                data = decode(data)
        except Exception as exc:
            self._report(ParseJobError(self.label, ack_id, str(exc)))
            if self.buries and ack_id and attempt >= self.poison_limit:
                # Delivered again and again and never decodable: off to the dead letters
                # instead of cycling forever.
                self.bury("", ack_id, f"undecodable after {attempt} deliveries: {exc}")
            # Otherwise not acknowledged: the lease runs out and it is handed out again.
            return None
        return StorageJob(job_id, data, attempt, ack_id, self)

    # -- finishing ------------------------------------------------------------------------

    def ack(self, job: StorageJob) -> None:
        """Acknowledge a finished job; failures are reported as AcknowledgeJobError.

        With ``acknowledge_many``, acknowledgements are group-committed without making
        anyone wait: the job's id joins the pending batch, and the first thread that finds
        no flush under way sends every pending id, batch after batch, until none is left.
        The others go straight on to their next job. ``unacked`` counts ids not yet sent; a
        stopping worker is not stopped before it is 0.
        """
        if not job.ack_id or not self.acked:
            return
        if not self._multi_ack:
            try:
                outcome: bool | BaseException = bool(self.storage.acknowledge(job.ack_id))
            except Exception as exc:
                outcome = exc
            self._settle(job, outcome)
            return
        if self._queue_ack(job):
            self._flush_pending()

    def ack_soon(self, job: StorageJob, executor: Executor) -> None:
        """Like :meth:`ack`, but a flush it has to start runs on ``executor``: never blocks."""
        if not job.ack_id or not self.acked:
            return
        if not self._multi_ack:
            with self._ack_lock:
                self.unacked += 1
            executor.submit(self._ack_one, job)
        elif self._queue_ack(job):
            executor.submit(self._flush_pending)

    def _ack_one(self, job: StorageJob) -> None:
        try:
            self.ack(job)
        finally:
            with self._ack_lock:
                self.unacked -= 1
            self.on_settled()

    def _queue_ack(self, job: StorageJob) -> bool:
        """Add ``job`` to the pending batch; ``True`` if the caller must flush it."""
        with self._ack_lock:
            self._ack_queue.append(job)
            self.unacked += 1
            if self._flushing:
                return False
            self._flushing = True
            return True

    def _flush_pending(self) -> None:
        while True:
            with self._ack_lock:
                batch, self._ack_queue = self._ack_queue, []
                if not batch:
                    self._flushing = False
                    break
            self._flush(batch)
            with self._ack_lock:
                self.unacked -= len(batch)
        self.on_settled()

    def _flush(self, batch: list[StorageJob]) -> None:
        try:
            results: list[bool | BaseException] = [
                bool(r) for r in self.storage.acknowledge_many([j.ack_id for j in batch])
            ]
            if len(results) != len(batch):
                raise RuntimeError(
                    f"acknowledge_many returned {len(results)} results for {len(batch)} ids"
                )
        except Exception as exc:
            results = [exc] * len(batch)
        for job, outcome in zip(batch, results, strict=True):
            self._settle(job, outcome)

    def _settle(self, job: StorageJob, outcome: bool | BaseException) -> None:
        if outcome is True:
            return
        cause = outcome if isinstance(outcome, BaseException) else None
        self._report(AcknowledgeJobError(job.id, job.ack_id, cause))

    def retry(self, job: StorageJob, delay: float) -> bool:
        """Give the job back to be taken again after ``delay`` seconds (a nack)."""
        try:
            kept = bool(self.storage.nack(job.ack_id, delay))
        except Exception as exc:
            self._report(AcknowledgeJobError(job.id, job.ack_id, exc))
            return False
        if not kept:
            self._report(AcknowledgeJobError(job.id, job.ack_id))
        else:
            self.expect_due(delay)
        return kept

    def bury(self, job_id: str, ack_id: str, error: str) -> bool:
        """Move the job leased under ``ack_id`` to the dead letters."""
        try:
            moved = bool(self.storage.dead_letter(ack_id, error))
        except Exception as exc:
            self._report(AcknowledgeJobError(job_id, ack_id, exc))
            return False
        if not moved:
            self._report(AcknowledgeJobError(job_id, ack_id))
        return moved

    def expect_due(self, delay: float) -> None:
        """Remember that a job becomes available in ``delay`` seconds."""
        due = time.monotonic() + max(delay, 0.0)
        if self.wake_at == 0.0 or due < self.wake_at:
            self.wake_at = due

    def stats(self) -> dict[str, float]:
        if isinstance(self.storage, IQueueStats):
            try:
                return dict(self.storage.stats())
            except Exception:
                pass
        return {
            "waiting": self.length(),
            "in_flight": self.running,
            "delayed": 0,
            "dead": 0,
            "oldest_age": 0.0,
        }
