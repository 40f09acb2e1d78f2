"""Job ids and job records of an in-memory queue: one job per id, and what ``handle.job(job_id)``
finds where no storage keeps them.

Like a storage queue's dedup, an in-memory queue holds each job id once: an add with an id that
a job of the queue holds stores nothing and answers that job's handle. Without records
(:class:`JobIds`) a job holds its id from its add until it closes; then the id is free again.

An in-memory queue bound with ``keep_results=SECONDS`` (``worker.bind_queue(keep_results=60)``)
keeps a :class:`~varmq.JobRecord` of every job added with an id, in this process
(:class:`JobBook`): read from the job's own handle while it waits or runs, then its outcome for
``keep_results`` seconds after it ended (and at most ``DEFAULT_KEEP_RESULTS_LIMIT`` ended ones).
As on storage queues, a kept record holds its id, also after its job ended. Results are the
values the function returned, as they are: nothing leaves the process, so nothing is encoded.
The progress a running job sets (``job.set_progress``) is kept by the book too, at every call
(no storage to spare), from the start of a run (each run starts without) to the end of its
record. Waiting for an end waits on the job's handle (no polling). No I/O here.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from ..contract.protocols import DEFAULT_KEEP_RESULTS_LIMIT
from ..model.errors import (
    JobAlreadyClosedError,
    JobCancelledError,
    JobNotFoundError,
    JobProcessingError,
)
from ..model.jobs import EnqueuedJob, Job, JobStatus
from ..model.loops import resolve
from ..model.progress import add_sink
from ..model.records import JobProgress, JobRecord, error_of

__all__ = ["JobBook", "JobIds"]

_CLOSED = JobStatus.CLOSED
_PROCESSING = JobStatus.PROCESSING


# A JobIds dict is swept of closed jobs once it holds this many entries (or twice as many as
# the last sweep left): a queue of few jobs never sweeps, and a sweep costs O(1) per add.
_SWEEP_MIN = 1024


class JobIds:
    """The ids held by the jobs of one in-memory queue without job records: one job per id.

    ``_lock`` guards ``_jobs`` (job id -> the job that took it last) and ``_sweep_at``; every
    read and change of ``_jobs``, the sweep's walk included, is made holding it. A job holds its
    id from its add until it closes (it ran to its end, went to the dead letters, or was
    cancelled or purged): a closed job's id is free, whether or not its entry is gone yet.
    Entries go when the run of their job is settled (:meth:`release`, called by the source), when
    the id is taken again, or, for jobs that closed without a run (cancelled, purged) and the
    few releases that found the lock busy, by a sweep once the dict has doubled since the last
    one. Jobs without an id (``""``) are not held. Per job no callback is registered: a million
    waiting jobs cost no extra objects for the garbage collector to walk.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, EnqueuedJob[Any]] = {}
        self._sweep_at = _SWEEP_MIN

    def hold(
        self, job: EnqueuedJob[Any], wait: float = 0.0, replacing: EnqueuedJob[Any] | None = None
    ) -> EnqueuedJob[Any] | None:
        """Let ``job`` (with an id, about to be offered to the queue) hold its id: ``None``, or
        the job that holds it already, and then ``job`` must not be offered. ``wait`` is unused
        here (see :meth:`JobBook.hold`); ``replacing``, a closed job whose id ``job`` may take
        over (always so here: a closed job holds nothing)."""
        job_id = job.id
        with self._lock:
            holder = self._jobs.get(job_id)
            if holder is not None and holder._status is not _CLOSED:
                return holder
            self._jobs[job_id] = job
            if len(self._jobs) >= self._sweep_at:
                self._sweep_locked()
        return None

    def release(self, job: Job[Any]) -> None:
        """``job`` closed (its run was settled): drop its entry, unless the lock is busy.

        Called by the threads that run jobs, once per job with an id: they never wait here
        (waiting threads would queue up behind the producers' adds). An entry left behind is
        harmless, its job being closed, and goes with the next sweep."""
        lock = self._lock
        if lock.acquire(blocking=False):
            try:
                if self._jobs.get(job.id) is job:
                    del self._jobs[job.id]
            finally:
                lock.release()

    def refused(self, job: EnqueuedJob[Any]) -> None:
        """The queue refused ``job`` (closed, full): its id is free."""
        with self._lock:
            if self._jobs.get(job.id) is job:
                del self._jobs[job.id]

    def _sweep_locked(self) -> None:
        jobs = self._jobs
        for job_id in [job_id for job_id, job in jobs.items() if job._status is _CLOSED]:
            del jobs[job_id]
        self._sweep_at = max(_SWEEP_MIN, 2 * len(jobs))

    def __len__(self) -> int:
        return len(self._jobs)


class _Entry:
    """A job with a record that has not ended: its handle and what the handle does not keep."""

    __slots__ = ("dead", "due", "enqueued_at", "job", "record", "started_at")

    def __init__(self, job: EnqueuedJob[Any], due: float) -> None:
        self.job = job
        self.enqueued_at = time.time()
        self.started_at: float | None = None
        self.due = due  # monotonic time before which it waits for a delay (0: none)
        self.dead = False  # settled into the dead letters
        self.record: JobRecord | None = None  # once ended


class JobBook:
    """The records of one in-memory queue, kept for ``keep`` seconds after each job ended.

    ``_lock`` guards ``_live`` (job id -> entry of a job that has not ended), ``_ended``
    (job id -> (record, monotonic expiry, the job's handle), in end order, at most ``limit``)
    and ``_progress`` (job id -> the progress its job set in its current run, for ids in
    ``_live`` only); an id is in at most one of ``_live`` and ``_ended``. An id with a record is
    held (:meth:`hold`): an add of it stores nothing until the record expires. The book is a
    progress sink (:mod:`varmq.model.progress`) for its running jobs.
    """

    def __init__(
        self,
        label: str,
        cancel_running: Callable[[EnqueuedJob[Any]], None],
        keep: float,
        limit: int = DEFAULT_KEEP_RESULTS_LIMIT,
    ) -> None:
        """``label`` names the queue in errors; ``cancel_running(job)`` stops a job of the
        queue that runs (as its timeout would)."""
        self._label = label
        self._cancel_running = cancel_running
        self._keep = keep
        self._limit = limit
        self._lock = threading.Lock()
        self._live: dict[str, _Entry] = {}
        self._ended: OrderedDict[str, tuple[JobRecord, float, EnqueuedJob[Any]]] = OrderedDict()
        self._progress: dict[str, JobProgress] = {}
        add_sink(self)

    # -- what the queue tells it -----------------------------------------------------------

    def hold(
        self, job: EnqueuedJob[Any], wait: float = 0.0, replacing: EnqueuedJob[Any] | None = None
    ) -> EnqueuedJob[Any] | None:
        """``job`` (with an id) is about to be offered to the queue, ``wait`` seconds delayed:
        ``None``, and it has the id's record; or the job whose record holds the id (waiting,
        running, or ended and kept), and then ``job`` must not be offered. ``replacing``: the
        job of a dead letter requeued as ``job``, whose own record does not hold the id."""
        entry = _Entry(job, time.monotonic() + wait if wait > 0 else 0.0)
        with self._lock:
            self._prune_locked(time.monotonic())
            live = self._live.get(job.id)
            if live is not None and live.job is not replacing:
                return live.job
            kept = self._ended.get(job.id)
            if kept is not None and kept[2] is not replacing:
                return kept[2]
            self._ended.pop(job.id, None)
            self._live[job.id] = entry
        if not job._add_callback(lambda: self._closed(entry)):
            self._closed(entry)
        return None

    def refused(self, job: EnqueuedJob[Any]) -> None:
        """The queue refused ``job``: it never had a life to record."""
        with self._lock:
            entry = self._live.get(job.id)
            if entry is not None and entry.job is job:
                del self._live[job.id]

    def started(self, job: EnqueuedJob[Any]) -> None:
        """``job`` was claimed to run: a run starts without progress."""
        entry = self._live.get(job.id)
        if entry is not None and entry.job is job:
            entry.started_at = time.time()
            entry.due = 0.0
            if self._progress:  # only ever set by jobs that set progress
                with self._lock:
                    self._progress.pop(job.id, None)

    def retrying(self, job: EnqueuedJob[Any], due: float) -> None:
        """``job`` failed and waits until the monotonic time ``due`` for another attempt."""
        entry = self._live.get(job.id)
        if entry is not None and entry.job is job:
            entry.due = due

    def dead(self, job: EnqueuedJob[Any]) -> None:
        """``job`` is about to close in the dead letters."""
        entry = self._live.get(job.id)
        if entry is not None and entry.job is job:
            entry.dead = True

    def _closed(self, entry: _Entry) -> None:
        """The job of ``entry`` closed: keep its outcome (and its last progress)."""
        job_id = entry.job.id
        with self._lock:
            live = self._live.get(job_id) is entry
            progress = self._progress.pop(job_id, None) if live else None
        record = entry.record = _ended_record(entry, progress)
        now = time.monotonic()
        with self._lock:
            if self._live.get(record.id) is not entry:
                return  # a newer job with the same id holds the record
            del self._live[record.id]
            self._ended[record.id] = (record, now + self._keep, entry.job)
            self._prune_locked(now)
            while len(self._ended) > self._limit:
                self._ended.popitem(last=False)

    def _prune_locked(self, now: float) -> None:
        ended = self._ended
        # In end order, all kept as long: the first that has not expired is followed by others
        # that have not either.
        while ended and next(iter(ended.values()))[1] <= now:
            ended.popitem(last=False)

    # -- what a handle asks (the Records protocol of varmq.api.records) --------------------

    def read(self, job_id: str) -> JobRecord | None:
        with self._lock:
            self._prune_locked(time.monotonic())
            entry = self._live.get(job_id)
            if entry is None:
                kept = self._ended.get(job_id)
                return None if kept is None else kept[0]
            progress = self._progress.get(job_id)
        return _live_record(entry, progress)

    async def read_async(self, job_id: str) -> JobRecord | None:
        return self.read(job_id)  # in memory: never blocks

    async def cancel_async(self, job_id: str) -> bool:
        return self.cancel(job_id)

    def _entry(self, job_id: str) -> _Entry | JobRecord:
        """The live entry of ``job_id``, or its ended record; raises when there is neither."""
        with self._lock:
            self._prune_locked(time.monotonic())
            entry = self._live.get(job_id)
            if entry is not None:
                return entry
            kept = self._ended.get(job_id)
        if kept is None:
            raise JobNotFoundError(self._label, job_id)
        return kept[0]

    def wait(self, job_id: str, timeout: float | None) -> JobRecord:
        found = self._entry(job_id)
        if isinstance(found, JobRecord):
            return found
        if not found.job.wait(timeout):
            raise TimeoutError(f"job {job_id!r} of queue {self._label!r} did not end in time")
        return found.record or _ended_record(found)

    async def wait_async(self, job_id: str, timeout: float | None) -> JobRecord:
        found = self._entry(job_id)
        if isinstance(found, JobRecord):
            return found
        loop = asyncio.get_running_loop()
        closed: asyncio.Future[None] = loop.create_future()

        def wake() -> None:
            with contextlib.suppress(RuntimeError):  # the awaiting loop is gone
                loop.call_soon_threadsafe(resolve, closed)

        if found.job._add_callback(wake):
            done, _ = await asyncio.wait({closed}, timeout=timeout)
            if not done:
                raise TimeoutError(f"job {job_id!r} of queue {self._label!r} did not end in time")
        return found.record or _ended_record(found)

    # -- progress (varmq.model.progress) ------------------------------------------------

    def progress_writer(self, job: Any) -> _ProgressWriter | None:
        """The writer of ``job``'s progress if it runs from this queue with a record."""
        if not isinstance(job, EnqueuedJob):
            return None
        with self._lock:
            entry = self._live.get(job.id)
        if entry is None or entry.job is not job or job._status is not _PROCESSING:
            return None
        return _ProgressWriter(self, entry)

    def set_progress(self, entry: _Entry, progress: JobProgress) -> None:
        """The job of ``entry`` set ``progress``: kept while that run goes on."""
        job = entry.job
        with self._lock:
            if self._live.get(job.id) is entry and job._status is _PROCESSING:
                self._progress[job.id] = progress

    def cancel(self, job_id: str) -> bool:
        with self._lock:
            entry = self._live.get(job_id)
        if entry is None:
            return False
        job = entry.job
        try:
            job.close()  # queued or delayed: closed as cancelled, skipped when reached
            return True
        except JobAlreadyClosedError:
            return False
        except JobProcessingError:
            pass
        job._request_cancel()
        self._cancel_running(job)
        return True


class _ProgressWriter:
    """Where a running job of a :class:`JobBook` puts its progress (``job.set_progress``)."""

    __slots__ = ("book", "entry")

    def __init__(self, book: JobBook, entry: _Entry) -> None:
        self.book = book
        self.entry = entry

    def set(self, fraction: float, message: str | None) -> None:
        self.book.set_progress(self.entry, JobProgress(fraction, message))


def _live_record(entry: _Entry, progress: JobProgress | None) -> JobRecord:
    job = entry.job
    status = job.status
    if status is JobStatus.CLOSED:
        return entry.record or _ended_record(entry, progress)
    running = status is JobStatus.PROCESSING
    waiting = "delayed" if entry.due > time.monotonic() else "queued"
    state = "running" if running else waiting
    return JobRecord(
        id=job.id,
        state=state,
        attempts=job.attempt if running else job.attempt - 1,
        enqueued_at=entry.enqueued_at,
        started_at=entry.started_at,
        cancel_requested=running and job._cancel_requested(),
        progress=progress,
    )


def _ended_record(entry: _Entry, progress: JobProgress | None = None) -> JobRecord:
    job = entry.job
    error = job._error
    ran = entry.started_at is not None
    result = None
    kept = None
    if error is None:
        state, result = "succeeded", job._value
    elif isinstance(error, JobCancelledError):
        state = "cancelled"
        kept = error_of(error) if error.running else None
    else:
        state = "dead" if entry.dead else "failed"
        kept = error_of(error)
    return JobRecord(
        id=job.id,
        state=state,
        attempts=job.attempt if ran else 0,
        result=result,
        error=kept,
        enqueued_at=entry.enqueued_at,
        started_at=entry.started_at,
        finished_at=time.time(),
        cancel_requested=isinstance(error, JobCancelledError) and error.running,
        progress=progress,
    )
