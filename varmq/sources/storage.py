"""A bound storage queue as the worker sees it: leased takes, decoding, and how a run is settled.

:class:`StorageSource` is the worker's side of the storage contract
(:mod:`varmq.contract.protocols`) for persistent and distributed queues. It takes jobs in
batches (one per free slot plus a prefetch) and decodes their JSON envelopes; their leases are
kept alive while they wait or run (:mod:`varmq.sources.leases`, which owns a lease from the take
to the acknowledgement); each run is settled through the storage: an acknowledgement
(group-committed, one per take where the jobs of the take finish close together), a nack with
a delay, or a dead letter. It also knows when the storage is worth looking at again: after a
signal, a poll interval after it was found empty, when a back-off after an error ends, or when
a job this process delayed falls due.

On a queue that keeps job records (:class:`~varmq.contract.protocols.IJobRecords`, opened with
``keep_results``) the settle carries the outcome in the same storage call: a result worker's
value with the acknowledgement (``acknowledge_with_results``, still group-committed), the error
of a final failure (``fail``) or of a dead letter (``dead_letter_with_error``). Its lease
renewals (``extend_lease_or_cancel``) are where a job learns it was cancelled by id: the
source then asks the worker to cancel it the way a timeout would. Where the storage keeps
progress (:class:`~varmq.contract.protocols.IJobProgress`), a running job's ``set_progress``
is written by the renewal thread (:mod:`varmq.sources.progress`), and a value not written yet
goes just before the settle. Without records, none of this runs: the records-off path is the
one above.

Its readiness fields (``maybe_ready``, ``taking``, ``empty_since``, ``retry_at``, ``_due``)
are guarded by the dispatcher's lock and changed only by the methods here. Its invariant: a
source is taken from by one thread at a time (``taking``), and a source found empty is looked
at again no later than ``poll`` seconds after, or at once when anyone signals it.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import Any

from ..contract import envelope
from ..contract.protocols import (
    IAcknowledgeable,
    IBatchAcknowledgeable,
    ICountedDelivery,
    IDeadLetterable,
    IJobProgress,
    IJobRecords,
    ILeaseExtendable,
    ILeaseReleasable,
    INackable,
    IQueueStats,
    IRateLimited,
    QueueStats,
)
from ..model.errors import (
    AcknowledgeJobError,
    FailedToCastJobError,
    ParseJobError,
    ResultNotJSONError,
)
from ..model.jobs import Job
from ..model.records import encode_error, encode_result
from ..model.retry import Outcome, after_failure, failure_text
from .base import Source, SourceSettings, Step
from .leases import Leases, StorageJob
from .progress import ProgressWrites
from .registration import WorkerRecords

__all__ = ["StorageSource"]

# Due times of delayed jobs a source remembers; beyond them, the poll finds the jobs.
_MAX_DUE = 4096
# How long after a job's due time the source is looked at (the storage's clock is not ours).
_DUE_MARGIN = 0.002


class StorageSource(Source):
    """A persistent or distributed queue: batch takes, leases, acknowledgement."""

    def __init__(
        self,
        storage: Any,
        settings: SourceSettings,
        *,
        poison_limit: int,
        on_settled: Callable[[], None],
        signal: Callable[[int, Source], None],
        thread_name: str,
        keep_values: bool = False,
    ) -> None:
        """``on_settled`` is told when held acknowledgements were sent; ``signal(n, source)``
        tells the worker a job was added; ``keep_values``: a result worker's, whose values
        go with the acknowledgements (on a queue with job records)."""
        super().__init__(storage, settings)
        self.storage_label = type(storage).__module__.split(".")[0]
        self._signal = signal
        self._poison_limit = poison_limit
        # What the storage offers, asked once: how a take is made, and whether it leases.
        self._batched = isinstance(storage, IBatchAcknowledgeable)
        self._deliveries = _deliveries(storage)
        self._leased = isinstance(storage, ILeaseExtendable)
        # A queue with a rate limit: after a take the limit cut short, the source sleeps until
        # the window opens (retry_at) instead of taking again at every signal or poll.
        self._rate: IRateLimited | None = None
        if isinstance(storage, IRateLimited) and storage.rate_limit is not None:
            self._rate = storage
        self.retries = isinstance(storage, INackable) and isinstance(storage, IDeadLetterable)
        self._buries = isinstance(storage, IDeadLetterable)
        self.can_release = isinstance(storage, ILeaseReleasable)
        # Job records: outcomes go with the settles, cancels come with the renewals.
        self.records = isinstance(storage, IJobRecords) and _keeps_records(storage)
        self.cancellable = self.records
        self._results = self.records and keep_values
        # -- readiness, guarded by the dispatcher's lock --
        # Storage is assumed to hold jobs until a take finds it empty.
        self.maybe_ready = True
        self.taking = False
        self.empty_since = 0.0
        #: Takes of this process that the queue's rate limit cut short (or refused).
        self.throttled_takes = 0
        self._free = 0  # the free slots the take under way was planned for
        # Guards _due: monotonic times at which jobs this process delayed or gave back become
        # due (a heap), so the source is looked at again at each of them, not only at the poll.
        self._due_lock = threading.Lock()
        self._due: list[float] = []
        self._taken_at = 0.0
        self._leases = Leases(
            storage,
            name=f"{thread_name}:leases:{self.label}",
            label=self.label,
            records=self.records,
            results=self._results,
            report=self._report,
            on_settled=on_settled,
            stop_cancelled=self._stop_cancelled,
        )
        self._acks = self._leases.acks
        # Running jobs' progress (job.set_progress), written by the renewal thread: only on a
        # queue with records whose storage keeps progress; None otherwise.
        self._progress: ProgressWrites | None = None
        if self.records and isinstance(storage, IJobProgress):
            self._progress = ProgressWrites(
                storage, label=self.label, holds=self._leases.holds, poke=self._leases.poke
            )
            self._leases.progress_due = self._progress.send_due

    def keep_worker_record(self, records: WorkerRecords) -> None:
        """Have the renewal thread also keep the worker's record in this queue's store
        (:mod:`varmq.sources.registration`), when the store keeps worker records."""
        name = str(getattr(self.storage, "name", self.label))
        due = records.bound(self.storage, name, self._leases.poke)
        self._leases.registration_due = due
        if due is not None and records.active:
            self._leases.poke(0.0)

    # -- selection ---------------------------------------------------------------------------

    def heard(self, action: str) -> None:
        """What a distributed queue's storage tells its subscriber (``subscribe``):
        ``"enqueued"``, a job was added by some process; the worker looks again."""
        if action == "enqueued":
            self._signal(0, self)

    def signalled_locked(self) -> None:
        """Someone added a job (this process, or another one that notified): look again."""
        self.maybe_ready = True

    def ready_locked(self) -> bool:
        if not self.maybe_ready or self.taking:
            return False
        return not self.retry_at or self.retry_at <= time.monotonic()

    def plan_locked(self, free: int, room: int) -> tuple[Step, Any] | None:
        # Every free slot, plus a prefetch so that one round trip feeds the slots that free up
        # while these jobs run. One take at a time; a signal during the take sets it again.
        self.taking = True
        self.maybe_ready = False
        self._free = free  # the jobs of the take beyond it are taken ahead (the prefetch)
        return Step.TAKE, (free + max(room, 0) if self._batched else 1)

    def take(self, n: int) -> tuple[int, list[Job[Any]]]:
        """Take up to ``n`` jobs: ``(how many the storage handed out, the decoded jobs)``.

        A storage error starts a back-off (``retry_at``), is reported, and gives ``(0, [])``.
        """
        self._taken_at = time.monotonic()  # the leases start no later than this
        try:
            deliveries = self._deliveries(n)
        except Exception as exc:
            self._take_failed(exc)
            return 0, []
        if self.retry_at:
            self._take_worked()  # the back-off after a failed take is over
        if self._rate is not None:
            wait = self._rate.throttled_for()
            if wait > 0:
                self.throttled_takes += 1
                self.retry_at = time.monotonic() + wait  # not a failure: no back-off, no report
                self._on_delayed()  # the timer looks again when the window opens
        jobs: list[Job[Any]] = []
        for item, ack_id, attempt in deliveries:
            job = self._decode(item, ack_id, attempt)
            if job is not None:
                jobs.append(job)
        return len(deliveries), jobs

    def _decode(self, item: Any, ack_id: str, attempt: int) -> StorageJob | None:
        if not isinstance(item, bytes | bytearray | memoryview | str):
            self._report(FailedToCastJobError(self.label, item))
            return None
        try:
            job_id, data, timeout, trace = envelope.decode(item)
            if self.decode is not None:
                data = self.decode(data)
        except Exception as exc:
            self._report(ParseJobError(self.label, ack_id, str(exc)))
            if self._buries and ack_id and attempt >= self._poison_limit:
                # Delivered again and again and never decodable: off to the dead letters
                # instead of cycling forever.
                self._bury("", ack_id, f"undecodable after {attempt} deliveries: {exc}")
            # Otherwise not acknowledged: the lease runs out and it is handed out again.
            return None
        job = StorageJob(job_id, data, attempt, ack_id)
        if timeout is not None:
            job._set_timeout(timeout)
        if trace is not None:
            job._more().trace = trace
        return job

    def taken_locked(self, n: int, delivered: int, jobs: list[Job[Any]]) -> None:
        self.taking = False
        if self.retry_at or delivered >= n:
            self.maybe_ready = True  # retried once the back-off is over; or more may wait
        elif not self.maybe_ready:
            # Short take and no signal since it began: empty until polled or signalled.
            self.empty_since = time.monotonic()
        if jobs and self._leased:
            self._leases.track(jobs, self._taken_at)  # type: ignore[arg-type]
            for job in jobs[self._free :]:
                job.ahead = True  # type: ignore[attr-defined]  # StorageJob (decoded here)

    def length(self) -> int:
        """Jobs waiting in the storage; raises when the storage cannot answer."""
        return len(self.storage)

    def waiting(self) -> int:
        """Jobs waiting to start: in the storage, taken and not started, and those this
        process delayed or handed back for a retry that are not due yet (as an in-memory
        queue counts its delayed jobs: a worker with a retry ahead is not idle)."""
        with self._due_lock:
            later = len(self._due)
        return self.length() + self.buffered + later

    # -- leases (varmq.sources.leases) ------------------------------------------------------

    def cancelled_here(self, job_id: str) -> None:
        """``job_id`` was just flagged cancelled in storage through this process: if this source
        holds its lease, stop it now rather than at the next renewal."""
        self._stop_cancelled(self._leases.cancelled(job_id))

    def _stop_cancelled(self, jobs: list[StorageJob]) -> None:
        """Stop ``jobs``, cancelled by id, as at a timeout (a job not started yet is settled
        when a slot reaches it, without running)."""
        for job in jobs:
            job._request_cancel()
            if self._cancel_running is not None:
                self._cancel_running(self, job)

    def start_check_due(self, job: Job[Any]) -> bool:
        assert isinstance(job, StorageJob)
        return self._leases.start_check_due(job)

    def may_start(self, job: Job[Any]) -> bool:
        assert isinstance(job, StorageJob)
        return self._leases.may_start(job)

    def expired_locked(self, job: Job[Any], now: float) -> bool:
        return self._leases.expired(job, now)  # type: ignore[arg-type]

    # -- after a run -------------------------------------------------------------------------

    def settle(self, job: Job[Any], value: Any, error: BaseException | None) -> Outcome:
        assert isinstance(job, StorageJob)
        if self._progress is not None:
            self._progress.flush(job)  # its last progress before its end (no call if none)
        self._leases.forget(job)
        if error is None:
            if not self._results:
                self._acks.send(job)
                return Outcome.OK
            error = self._keep_result(job, value)
            if error is None:
                self._acks.send(job)
                return Outcome.OK
        self._failed(job, error)
        outcome, delay = after_failure(self.retry, error, job.attempt)
        if outcome is not Outcome.FAILED and self._leases.cancel_requested(job):
            # Cancelled by id (heard now or before): whatever it raised, not run again; and
            # ended by fail, so that its record keeps this run's error and attempt.
            outcome = Outcome.FAILED
        if outcome is Outcome.FAILED or not self.retries:
            if self.records:
                self._fail(job, error)
                self._acks.leave(job)
            else:
                self._acks.send(job)
            return Outcome.FAILED
        if outcome is Outcome.RETRIED:
            self._nack(job, delay)
        else:
            self._bury(job.id, job.ack_id, failure_text(error), error)
        self._acks.leave(job)
        return outcome

    def _keep_result(self, job: StorageJob, value: Any) -> ResultNotJSONError | None:
        """Encode a result worker's ``value`` for its record (``job.result``); the error that
        fails the job instead when JSON cannot hold it."""
        try:
            job.result = encode_result(value)
        except (TypeError, ValueError) as exc:
            return ResultNotJSONError(job.id, self.label, str(exc))
        return None

    async def settle_async(
        self, job: Job[Any], value: Any, error: BaseException | None, io: Executor
    ) -> Outcome:
        assert isinstance(job, StorageJob)
        if error is None and self._results:
            error = self._keep_result(job, value)  # if not encodable: a failure, settled below
        progress = self._progress
        if error is None and (progress is None or not progress.unsent(job)):
            self._leases.forget(job)
            self._acks.send_soon(job, io)
            return Outcome.OK
        # Retrying, dead-lettering or writing a progress not written yet is a storage round
        # trip: off the loop.
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(io, self.settle, job, value, error)

    @property
    def pending_acks(self) -> int:
        return self._acks.unacked

    def release(self, job: Job[Any]) -> bool:
        assert isinstance(job, StorageJob)
        self._leases.forget(job)
        try:
            released = bool(self.storage.release(job.ack_id))
        except Exception as exc:
            self._report(self._unsettled(job.id, job.ack_id, "release", exc))
            released = False
        else:
            if not released:
                self._report(self._unsettled(job.id, job.ack_id, "release"))
        self._acks.leave(job)
        return released

    def give_back_running(self) -> tuple[int, int]:
        # nack(ack_id, 0): available again at once, and the delivery counts (the job started:
        # its next take is its next attempt, as after a lease that ran out, so a job that keeps
        # being interrupted still meets poison_limit and its retry policy). release() does not
        # count the delivery (it is for jobs never started): the fallback only where the
        # storage cannot nack. A job whose function returns meanwhile has its acknowledgement
        # refused (reported): it runs again, as it would after its lease.
        jobs = self._leases.let_go()
        storage = self.storage
        give: Callable[[str], object]
        if isinstance(storage, INackable):
            op, give = "nack", lambda ack_id: storage.nack(ack_id, 0.0)
        elif self.can_release:
            op, give = "release", storage.release
        else:
            for job in jobs:
                self._acks.leave(job)
            return 0, len(jobs)
        handed = 0
        for job in jobs:
            try:
                given = bool(give(job.ack_id))
            except Exception as exc:
                self._report(self._unsettled(job.id, job.ack_id, op, exc))
            else:
                if given:
                    handed += 1
                else:
                    self._report(self._unsettled(job.id, job.ack_id, op))
            self._acks.leave(job)  # acknowledgements held for its take go now
        return handed, len(jobs) - handed

    def _unsettled(
        self, job_id: str, ack_id: str, op: str, cause: BaseException | None = None
    ) -> AcknowledgeJobError:
        """The error of a settle the storage refused (``cause``: or failed)."""
        return AcknowledgeJobError(job_id, ack_id, cause, queue=self.label, op=op)

    def _nack(self, job: StorageJob, delay: float) -> None:
        """Give the job back to be taken again after ``delay`` seconds."""
        try:
            kept = bool(self.storage.nack(job.ack_id, delay))
        except Exception as exc:
            self._report(self._unsettled(job.id, job.ack_id, "nack", exc))
            return
        if not kept:
            self._report(self._unsettled(job.id, job.ack_id, "nack"))
            return
        self.expect_due(delay)
        self._on_delayed()

    def _fail(self, job: StorageJob, error: BaseException) -> None:
        """End the job for good with ``error`` in its record (job records only)."""
        try:
            ended = bool(self.storage.fail(job.ack_id, encode_error(error)))
        except Exception as exc:
            self._report(self._unsettled(job.id, job.ack_id, "fail", exc))
            return
        if not ended:
            self._report(self._unsettled(job.id, job.ack_id, "fail"))

    def _bury(
        self, job_id: str, ack_id: str, error: str, cause: BaseException | None = None
    ) -> None:
        """Move the job leased under ``ack_id`` to the dead letters (with records: ``cause``,
        or the text, kept in its record too)."""
        try:
            if self.records:
                kept = encode_error(
                    cause if cause is not None else ParseJobError(self.label, ack_id, error)
                )
                moved = bool(self.storage.dead_letter_with_error(ack_id, error, kept))
            else:
                moved = bool(self.storage.dead_letter(ack_id, error))
        except Exception as exc:
            self._report(self._unsettled(job_id, ack_id, "dead-letter", exc))
            return
        if not moved:
            self._report(self._unsettled(job_id, ack_id, "dead-letter"))

    # -- time --------------------------------------------------------------------------------

    def expect_due(self, delay: float) -> None:
        """Remember that a job becomes available in ``delay`` seconds.

        At most ``_MAX_DUE`` times are kept; beyond that the poll finds the rest.
        """
        # Storages round a delay up to whole milliseconds on their own clock: look a little
        # after that, so that the take finds the job due rather than a moment too early.
        due = time.monotonic() + math.ceil(max(delay, 0.0) * 1000) / 1000 + _DUE_MARGIN
        with self._due_lock:
            if len(self._due) < _MAX_DUE:
                heapq.heappush(self._due, due)

    def needs_timer(self) -> bool:
        return True

    def worker_stopped(self) -> None:
        self._leases.stop()

    def tick_locked(self, now: float, poll: float) -> tuple[bool, float | None]:
        woke = False
        later: list[float] = []
        with self._due_lock:
            due = self._due
            if due and due[0] <= now:
                while due and due[0] <= now:
                    heapq.heappop(due)
                self.maybe_ready = woke = True
            if due:
                later.append(due[0])
        if self.retry_at:
            if self.retry_at <= now:
                woke = True  # the back-off is over
            else:
                later.append(self.retry_at)
        elif not self.maybe_ready and not self.taking:
            polled_at = self.empty_since + poll
            if polled_at <= now:
                self.maybe_ready = woke = True
            else:
                later.append(polled_at)
        return woke, min(later, default=None)

    # -- operators ---------------------------------------------------------------------------

    def stats(self) -> QueueStats:
        """The storage's counts; raises when the storage cannot answer."""
        if isinstance(self.storage, IQueueStats):
            return self.storage.stats()
        return {
            "waiting": self.length() + self.buffered,
            "in_flight": self.running,
            "delayed": 0,
            "dead": 0,
            "oldest_age": 0.0,
        }


def _keeps_records(storage: Any) -> bool:
    """Whether ``storage`` (an ``IJobRecords``) was opened with ``keep_results`` above 0."""
    try:
        return float(storage.keep_results) > 0
    except Exception:
        return False


def _deliveries(storage: Any) -> Callable[[int], Sequence[tuple[Any, str, int]]]:
    """How to take up to ``n`` jobs from ``storage``, as ``(item, ack id, attempt)``: the
    richest take it offers, chosen once."""
    if isinstance(storage, ICountedDelivery):
        take_counted = storage.dequeue_batch_with_attempts
        return lambda n: [(i, a, int(k)) for i, a, k in take_counted(n)]
    if isinstance(storage, IBatchAcknowledgeable):
        take_batch = storage.dequeue_batch_with_ack_ids
        return lambda n: [(i, a, 1) for i, a in take_batch(n)]
    if isinstance(storage, IAcknowledgeable):

        def take_one(n: int) -> list[tuple[Any, str, int]]:
            got = storage.dequeue_with_ack_id()
            return [] if got is None else [(got[0], got[1], 1)]

        return take_one

    def take_unleased(n: int) -> list[tuple[Any, str, int]]:
        item = storage.dequeue()
        return [] if item is None else [(item, "", 1)]

    return take_unleased
