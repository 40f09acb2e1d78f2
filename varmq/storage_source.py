"""A bound storage queue as the worker sees it: leased takes, lease renewal, acknowledgements.

:class:`StorageSource` is the worker's side of the storage contract
(:mod:`varmq.contract.protocols`) for persistent and distributed queues. It takes jobs in batches
(one per free slot plus a prefetch), decodes their JSON envelopes, keeps their leases alive while
they wait or run, and settles each run through the storage: an acknowledgement (group-committed, one
per take where the jobs of the take finish close together: see :mod:`varmq.acks`), a nack with a
delay, or a dead letter. It also knows when the storage is worth looking at again: after a signal, a
poll interval after it was found empty, when a back-off after an error ends, or when a job this
process delayed falls due.

On a queue that keeps job records (:class:`~varmq.contract.protocols.IJobRecords`, opened with
``keep_results``) the settle carries the outcome in the same storage call: a result worker's
value with the acknowledgement (``acknowledge_with_results``, still group-committed), the error
of a final failure (``fail``) or of a dead letter (``dead_letter_with_error``). Its lease
renewals (``extend_lease_or_cancel``) are where a job learns it was cancelled by id: the
source then asks the worker to cancel it the way a timeout would. Without records, none of this
runs: the records-off path is the one above.

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

from .acks import Acknowledgements, Take, take_of
from .contract import envelope
from .contract.protocols import (
    IAcknowledgeable,
    IBatchAcknowledgeable,
    ICountedDelivery,
    IDeadLetterable,
    IJobRecords,
    ILeaseExtendable,
    ILeaseReleasable,
    IMultiAcknowledgeable,
    INackable,
    IQueueStats,
    QueueStats,
)
from .errors import (
    AcknowledgeJobError,
    FailedToCastJobError,
    LeaseLostError,
    ParseJobError,
    ResultNotJSONError,
)
from .job import Job
from .records import Records, StorageRecords, encode_error, encode_result
from .retry import Outcome, after_failure, failure_text
from .sources import Source, Step
from .timer import LeaseRenewer

__all__ = ["StorageJob", "StorageSource"]

# Due times of delayed jobs a source remembers; beyond them, the poll finds the jobs.
_MAX_DUE = 4096
# How long after a job's due time the source is looked at (the storage's clock is not ours).
_DUE_MARGIN = 0.002
# After a renewal that raised (storage unreachable), try again this soon.
_RENEW_RETRY = 1.0
# On a queue with job records, leases are renewed at least this often, so that a running job
# hears of a cancel within this many seconds however long its lease is.
_CANCEL_CHECK = 5.0


class StorageJob(Job[Any]):
    """A job taken from storage: it carries its lease (ack id) and when to renew it."""

    __slots__ = ("ack_id", "cancel_seen", "deadline", "lost", "renew_at", "result", "take")

    #: The JSON bytes of a result worker's value, set just before the acknowledgement that
    #: records it (job records only; never set otherwise).
    result: bytes

    def __init__(self, job_id: str, data: Any, attempt: int, ack_id: str) -> None:
        # Job's fields set here directly: this runs once per job taken.
        self.id = job_id
        self.data = data
        self.attempt = attempt
        self._extra = None
        self.ack_id = ack_id
        #: When to renew the lease next, and when it runs out (this process's monotonic clock).
        self.renew_at = 0.0
        self.deadline = float("inf")
        #: Set once the lease is known to be lost: the job must not start (or be settled) here.
        self.lost = False
        #: Set once a lease renewal said the job was cancelled by id (job records only).
        self.cancel_seen = False
        #: The jobs taken with it, while its acknowledgement may wait for them (see acks).
        self.take: Take | None = None


class StorageSource(Source):
    """A persistent or distributed queue: batch takes, leases, acknowledgement."""

    def __init__(
        self,
        storage: Any,
        *,
        poison_limit: int,
        wake_timer: Callable[[], None],
        on_settled: Callable[[], None],
        thread_name: str,
        keep_values: bool = False,
        **options: Any,
    ) -> None:
        super().__init__(storage, on_delayed=wake_timer, **options)
        self.storage_label = type(storage).__module__.split(".")[0]
        self._poison_limit = poison_limit
        # What the storage offers, asked once.
        self._counted = isinstance(storage, ICountedDelivery)
        self._batched = isinstance(storage, IBatchAcknowledgeable)
        self._acked = isinstance(storage, IAcknowledgeable)
        self._leased = isinstance(storage, ILeaseExtendable)
        self.retries = isinstance(storage, INackable) and isinstance(storage, IDeadLetterable)
        self._buries = isinstance(storage, IDeadLetterable)
        self.can_release = isinstance(storage, ILeaseReleasable)
        # Job records: outcomes go with the settles, cancels come with the renewals.
        self.records = isinstance(storage, IJobRecords) and _keeps_records(storage)
        self._job_records: StorageRecords | None = None  # built at the first job_records()
        self.cancellable = self.records
        self._results = self.records and keep_values
        # -- readiness, guarded by the dispatcher's lock --
        # Storage is assumed to hold jobs until a take finds it empty.
        self.maybe_ready = True
        self.taking = False
        self.empty_since = 0.0
        # Guards _due: monotonic times at which jobs this process delayed or gave back become
        # due (a heap), so the source is looked at again at each of them, not only at the poll.
        self._due_lock = threading.Lock()
        self._due: list[float] = []
        # Guards _leases: the jobs taken and not settled whose leases this source renews.
        self._lease_lock = threading.Lock()
        self._leases: dict[int, StorageJob] = {}
        self._taken_at = 0.0
        self._renewer = LeaseRenewer(self._renewal_round, f"{thread_name}:leases:{self.label}")
        self._acks = Acknowledgements(
            storage,
            batched=isinstance(storage, IMultiAcknowledgeable),
            report=self._report,
            on_settled=on_settled,
            on_hold=self._renewer.poke,
            results=self._results,
        )

    # -- selection ---------------------------------------------------------------------------

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
        return Step.TAKE, (free + max(room, 0) if self._batched else 1)

    def take(self, n: int) -> tuple[int, list[Job[Any]]]:
        """Take up to ``n`` jobs: ``(how many the storage handed out, the decoded jobs)``.

        A storage error starts a back-off (``retry_at``), is reported, and gives ``(0, [])``.
        """
        self._taken_at = time.monotonic()  # the leases start no later than this
        try:
            deliveries = self._take_raw(n)
        except Exception as exc:
            self._take_failed(exc)
            return 0, []
        self._take_worked()
        jobs: list[Job[Any]] = []
        for item, ack_id, attempt in deliveries:
            job = self._decode(item, ack_id, attempt)
            if job is not None:
                jobs.append(job)
        return len(deliveries), jobs

    def _take_raw(self, n: int) -> Sequence[tuple[Any, str, int]]:
        storage = self.storage
        if self._counted:
            return [(i, a, int(k)) for i, a, k in storage.dequeue_batch_with_attempts(n)]
        if self._batched:
            return [(i, a, 1) for i, a in storage.dequeue_batch_with_ack_ids(n)]
        if self._acked:
            got = storage.dequeue_with_ack_id()
            return [] if got is None else [(got[0], got[1], 1)]
        item = storage.dequeue()
        return [] if item is None else [(item, "", 1)]

    def _decode(self, item: Any, ack_id: str, attempt: int) -> StorageJob | None:
        if not isinstance(item, bytes | bytearray | memoryview | str):
            self._report(FailedToCastJobError(self.label, item))
            return None
        try:
            job_id, data, timeout = envelope.decode(item)
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
        job._set_timeout(timeout)
        return job

    def taken_locked(self, n: int, delivered: int, jobs: list[Job[Any]]) -> None:
        self.taking = False
        if self.retry_at or delivered >= n:
            self.maybe_ready = True  # retried once the back-off is over; or more may wait
        elif not self.maybe_ready:
            # Short take and no signal since it began: empty until polled or signalled.
            self.empty_since = time.monotonic()
        if jobs and self._leased:
            self._track(jobs, self._taken_at)  # type: ignore[arg-type]

    def length(self) -> int:
        """Jobs waiting in the storage; raises when the storage cannot answer."""
        return len(self.storage)

    # -- leases ------------------------------------------------------------------------------
    #
    # Every job taken under a lease has a deadline on this process's monotonic clock: the take's
    # start plus the lease, moved on by each renewal that the storage confirmed (from the moment
    # the renewal was sent). A renewal that fails to reach the storage is retried until that
    # deadline passes; only a refusal (the storage says the lease is not held) or a passed
    # deadline loses the lease. A lost lease is reported once, and a job that lost it before it
    # started is dropped instead of run (another consumer has it now).

    def _lease_seconds(self) -> float:
        try:
            return float(self.storage.lease_seconds)
        except Exception:
            return 0.0

    def _track(self, jobs: list[StorageJob], started: float) -> None:
        """Renew the leases of ``jobs`` (taken at ``started``) until they are settled."""
        lease = self._lease_seconds()
        if lease <= 0:
            return
        renew_at = started + self._renew_period(lease)
        if self._acks.batched:
            take_of(jobs, started, lease)
        with self._lease_lock:
            for job in jobs:
                job.deadline = started + lease
                job.renew_at = renew_at
                self._leases[id(job)] = job
        self._renewer.poke(renew_at)  # its next renewal may be sooner than it planned

    def _renew_period(self, lease: float) -> float:
        """Seconds between two renewals of a lease of ``lease`` seconds."""
        period = lease / 3
        return min(period, _CANCEL_CHECK) if self.records else period

    def job_records(self) -> Records:
        records = self._job_records
        if records is None:
            from .handles import _call_async  # handles builds on this module

            records = self._job_records = StorageRecords(self.storage, self.label, _call_async)
        return records

    def cancelled_here(self, job_id: str) -> None:
        """``job_id`` was just flagged cancelled in storage through this process: if this source
        holds its lease, stop it now rather than at the next renewal."""
        with self._lease_lock:
            found = [j for j in self._leases.values() if j.id == job_id and not j.cancel_seen]
            for job in found:
                job.cancel_seen = True
        self._stop_cancelled(found)

    def _stop_cancelled(self, jobs: list[StorageJob]) -> None:
        """Stop ``jobs``, cancelled by id, as at a timeout (a job not started yet is settled
        when a slot reaches it, without running)."""
        for job in jobs:
            job._request_cancel()
            if self._cancel_running is not None:
                self._cancel_running(self, job)

    def _forget(self, job: Job[Any]) -> None:
        if self._leases:
            with self._lease_lock:
                self._leases.pop(id(job), None)

    def expired_locked(self, job: Job[Any], now: float) -> bool:
        assert isinstance(job, StorageJob)
        if not (job.lost or now >= job.deadline):
            return False
        with self._lease_lock:
            self._leases.pop(id(job), None)
        self._acks.leave(job, flush=False)  # under the dispatcher's lock: no storage call
        if not job.lost:
            job.lost = True
            self._report(LeaseLostError(job.id, job.ack_id))
        return True

    def _renewal_round(self, now: float) -> float | None:
        """The renewal thread's work: held acknowledgements whose hold ran out, then leases;
        when to come back (``None``: nothing is held)."""
        due = (self._acks.send_held(now), self.renew_leases(time.monotonic()))
        return min((at for at in due if at is not None), default=None)

    def renew_leases(self, now: float) -> float | None:
        """Renew the leases that are due; the time of the next renewal (``None``: none held).

        Runs on this source's renewal thread, so a storage that hangs delays no other one.
        """
        with self._lease_lock:
            due = [job for job in self._leases.values() if job.renew_at <= now]
            later = [job.renew_at for job in self._leases.values() if job.renew_at > now]
        if not due:
            return min(later, default=None)
        lease = self._lease_seconds()
        period = self._renew_period(lease)
        cancelled: list[StorageJob] = []
        for job in due:
            sent = time.monotonic()
            cancel = False
            try:
                if self.records:
                    answer = self.storage.extend_lease_or_cancel(job.ack_id)
                    kept, cancel = answer != "lost", answer == "cancel"
                else:
                    kept = bool(self.storage.extend_lease(job.ack_id))
            except Exception:
                # Storage unreachable: the lease may still be ours until its deadline.
                if time.monotonic() < job.deadline:
                    job.renew_at = time.monotonic() + min(_RENEW_RETRY, lease / 6)
                    continue
                kept = False
            with self._lease_lock:
                if id(job) not in self._leases:
                    continue  # settled meanwhile
                if kept:
                    job.deadline = sent + lease
                    job.renew_at = sent + period
                    if cancel and not job.cancel_seen:
                        job.cancel_seen = True
                        cancelled.append(job)
                    continue
                del self._leases[id(job)]
            job.lost = True
            self._report(LeaseLostError(job.id, job.ack_id))
        self._stop_cancelled(cancelled)
        return time.monotonic()  # renewals took time: look again at once

    # -- after a run -------------------------------------------------------------------------

    def settle(self, job: Job[Any], value: Any, error: BaseException | None) -> Outcome:
        assert isinstance(job, StorageJob)
        self._forget(job)
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
        if job.cancel_seen:
            outcome = Outcome.FAILED  # cancelled by id: whatever it raised, not run again
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
        if error is None:
            self._forget(job)
            self._acks.send_soon(job, io)
            return Outcome.OK
        # Retrying or dead-lettering is a storage round trip: off the loop.
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(io, self.settle, job, value, error)

    @property
    def pending_acks(self) -> int:
        return self._acks.unacked

    def release(self, job: Job[Any]) -> bool:
        assert isinstance(job, StorageJob)
        self._forget(job)
        try:
            released = bool(self.storage.release(job.ack_id))
        except Exception as exc:
            self._report(AcknowledgeJobError(job.id, job.ack_id, exc))
            released = False
        else:
            if not released:
                self._report(AcknowledgeJobError(job.id, job.ack_id))
        self._acks.leave(job)
        return released

    def _nack(self, job: StorageJob, delay: float) -> None:
        """Give the job back to be taken again after ``delay`` seconds."""
        try:
            kept = bool(self.storage.nack(job.ack_id, delay))
        except Exception as exc:
            self._report(AcknowledgeJobError(job.id, job.ack_id, exc))
            return
        if not kept:
            self._report(AcknowledgeJobError(job.id, job.ack_id))
            return
        self.expect_due(delay)
        self._on_delayed()

    def _fail(self, job: StorageJob, error: BaseException) -> None:
        """End the job for good with ``error`` in its record (job records only)."""
        try:
            ended = bool(self.storage.fail(job.ack_id, encode_error(error)))
        except Exception as exc:
            self._report(AcknowledgeJobError(job.id, job.ack_id, exc))
            return
        if not ended:
            self._report(AcknowledgeJobError(job.id, job.ack_id))

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
            self._report(AcknowledgeJobError(job_id, ack_id, exc))
            return
        if not moved:
            self._report(AcknowledgeJobError(job_id, ack_id))

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
        self._renewer.stop()

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
