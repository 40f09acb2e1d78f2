"""Handles of in-memory queues: what ``bind_queue``/``bind_priority_queue``/``with_queue`` return,
and where an in-memory job's path starts.

``add`` makes a job handle (:mod:`varmq.model.jobs`, the worker kind's class) and puts it in the
queue's storage, or gives it straight to an idle thread (:func:`varmq.engine.fastpath.hand_over`);
then it tells the worker's dispatcher that work is there. A job with an id first asks the queue's
ids (:attr:`~varmq.sources.memory.MemorySource.ids`): an id a job of the queue holds adds nothing,
and ``add`` answers that job's handle, as a storage queue's dedup answers ``True``. A handle can
delay a job (``delay=`` seconds or ``run_at=`` a datetime), lists, requeues and purges its
queue's dead letters, and, bound with ``keep_results``, follows its jobs by id
(:class:`~varmq.api.records.FollowJobs`).
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, Generic, cast

from typing_extensions import TypeVar

from ..contract import observe
from ..engine.dispatch import Forks
from ..engine.fastpath import hand_over
from ..model.errors import EnqueueError
from ..model.groups import EnqueuedGroupJob, Item
from ..model.jobs import EnqueuedJob
from ..model.retry import DeadLetter
from .handles import Handle, JobMaker, Producer, delay_of, job_id_of, priority_of, timeout_of
from .records import FollowJobs, Records

if TYPE_CHECKING:
    from ..sources.memory import MemorySource

__all__ = ["PriorityQueue", "Queue"]

T = TypeVar("T")
H = TypeVar("H", bound=EnqueuedJob[Any])
G = TypeVar("G", bound=EnqueuedGroupJob)
W = TypeVar("W", default=Any)
"""The worker a handle is bound to (``queue.worker``)."""


class _MemoryHandle(Handle, FollowJobs, Generic[T, H, G, W]):
    def __init__(
        self,
        storage: Any,
        capacity: int,
        source: MemorySource,
        producer: Producer,
        jobs: JobMaker[H, G],
        worker: W,
    ) -> None:
        super().__init__(storage, capacity)
        self._source = source
        self._producer = producer
        self._jobs = jobs
        self._worker = worker
        assert producer.dispatch is not None
        self._dispatch = producer.dispatch
        # What every add uses, looked up once.
        self._new_job = jobs.new_job
        self._next_id = producer.next_id
        # Whether an add without an id, delay or timeout may take the short path (_add_plain):
        # a queue with job records has its book told of each add, and a rate-limited queue's
        # jobs are never handed straight to a thread.
        self._plain = source.book is None and source.rate is None
        # One job per id in the queue: asked before a job with an id is offered.
        self._ids = source.ids

    @property
    def worker(self) -> W:
        """The worker this queue is bound to."""
        return self._worker

    @property
    def _label(self) -> str:
        return self._source.label

    def _job_records(self) -> Records:
        book = self._source.book
        if book is None:
            raise ValueError(
                f"varmq: queue {self._source.label!r} keeps no job records: bind it with "
                "keep_results=SECONDS to follow jobs by id"
            )
        return book

    def _holder(self, job: H, wait: float, replacing: Any = None) -> H | None:
        """Let ``job`` hold its id in the queue (its record, with ``keep_results``): ``None``,
        or the job that holds the id already, and then ``job`` must not be offered."""
        # The holder was added through a handle of this queue, so it is a job of its kind; one
        # loaded from a snapshot is a plain EnqueuedJob (documented in docs/snapshots.md).
        return cast("H | None", self._ids.hold(job, wait, replacing))

    def _offer(self, job: H, priority: int | None, wait: float) -> bool:
        """Put ``job`` (which holds its id, if it has one) in line, or among the delayed jobs
        for ``wait`` seconds; ``False`` when the queue refused it (closed, full)."""
        job._queued(priority)
        if wait > 0:
            self._source.delayed.add(job, time.monotonic() + wait)
            return True
        if not self._source.offer(job):
            if job.id:
                self._ids.refused(job)
            job._refused()
            return False
        return True

    def _add_plain(self, data: Any, priority: int | None, strict: bool) -> H | None:
        """The common add, with no id, delay or timeout of its own, to a queue without job
        records: what :meth:`_add` does for it, in fewer steps (it runs once per job)."""
        if observe.OBSERVER is not None:
            return self._add(data, priority, None, 0.0, strict, None)
        dispatch = self._dispatch
        if dispatch.forks != Forks.count:
            dispatch.check_process()
        job = self._new_job(self._next_id(), data, None)
        if job.id:  # from the worker's job_id_generator: held like an id given to add
            holder = self._ids.hold(job)
            if holder is not None:
                return cast(H, holder)  # see _holder
        job._queued(priority)
        source = self._source
        # A parked thread may take it at once (the fast path); a busy worker has none, and
        # costs its producers no call here.
        if dispatch.idle and hand_over(dispatch, source, job):
            return job
        if priority is None:
            stored = self._storage.enqueue(job)
        else:
            stored = self._storage.enqueue(job, priority)
        if not stored:
            if job.id:
                self._ids.refused(job)
            job._refused()
            self._refuse(job, strict)
            return None
        dispatch.signal(1)
        return job

    def _refuse(self, job: H, strict: bool) -> None:
        """The queue refused ``job`` (closed, full): ``None`` for the caller, or with
        ``strict`` an :class:`EnqueueError`."""
        if strict:
            raise EnqueueError(self._source.label, job.id, "the queue is closed or full")

    def _add(
        self,
        data: Any,
        priority: int | None,
        job_id: str | None,
        wait: float,
        strict: bool,
        timeout: float | None,
    ) -> H | None:
        observer = observe.OBSERVER
        if observer is None:
            return self._add_job(data, priority, job_id, wait, strict, timeout, None)
        send = observer.send(self._source.label, "send", job_id)
        try:
            job = self._add_job(data, priority, job_id, wait, strict, timeout, send.carrier)
        except BaseException as exc:
            send.end(job_id, exc, False)
            raise
        send.end(job_id if job is None else job.id, None, job is not None)
        return job

    def _add_job(
        self,
        data: Any,
        priority: int | None,
        job_id: str | None,
        wait: float,
        strict: bool,
        timeout: float | None,
        trace: dict[str, str] | None,
    ) -> H | None:
        dispatch = self._dispatch
        if dispatch.forks != Forks.count:
            dispatch.check_process()
        job = self._new_job(job_id or self._next_id(), data, None)
        if job.id:
            holder = self._ids.hold(job, wait)
            if holder is not None:
                return cast(H, holder)  # already in the queue (see _holder): nothing added
        if timeout is not None:
            job._set_timeout(timeout)
        if trace:
            job._more().trace = trace
        if not self._offer(job, priority, wait):
            self._refuse(job, strict)
            return None
        if wait > 0:
            dispatch.add_submitted(1)
            self._producer.on_delayed()
        else:
            dispatch.signal(1)
        return job

    def _add_all(self, items: Iterable[Any], prioritised: bool) -> G:
        entries = [i if isinstance(i, Item) else Item(i) for i in items]
        group, wrap = self._jobs.new_group(len(entries))
        jobs: list[H] = []
        for entry in entries:
            job = self._new_job(entry.id or self._next_id(), entry.data, group)
            if job.id and self._holder(job, 0.0) is not None:
                # Its id is in the queue already: not added, so done at once, like a refusal.
                group.member_done(job.id, None, None, ran=False)
            elif self._offer(job, entry.priority if prioritised else None, 0.0):
                jobs.append(job)
            else:
                group.member_done(job.id, None, None, ran=False)
        if jobs:
            self._dispatch.signal(len(jobs))
        return wrap(group, jobs)

    def dead_letters(self, limit: int = 100) -> list[DeadLetter]:
        """Jobs that ran out of attempts (with a retry policy), oldest first."""
        return self._source.dead.letters(limit)

    def requeue_dead(self, keys: Sequence[str] | None = None) -> int:
        """Run dead letters again as new jobs (all when ``keys`` is ``None``); how many.

        A letter whose id another job of the queue holds now stays a dead letter."""
        requeued = 0
        dead = self._source.dead
        # Under the dispatcher's lock, a snapshot sees each letter either dead or requeued.
        with self._dispatch.lock:
            held = []
            for letter, old in dead.take_entries(None if keys is None else set(keys)):
                job = self._new_job(old.id, old.data, None)
                if job.id and self._holder(job, 0.0, old) is not None:
                    held.append((letter, old))
                elif self._offer(job, old._priority, 0.0):
                    requeued += 1
            if held:
                dead.put_back(held)
        if requeued:
            self._dispatch.signal(0)
        return requeued

    def purge_dead(self) -> int:
        """Forget every dead letter; how many there were."""
        return len(self._source.dead.take(None))


class Queue(_MemoryHandle[T, H, G, W]):
    """A FIFO queue bound to a worker."""

    def add(
        self,
        data: T,
        *,
        job_id: str | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
        timeout: float | None = None,
        strict: bool = False,
    ) -> H | None:
        """Add a job; its handle, or ``None`` when the queue refused it (closed, full).

        A ``job_id`` that a job of the queue holds (waiting, delayed, running or waiting out a
        retry; with ``keep_results``, as long as its record is kept) adds nothing: the answer is
        that job's handle, as a storage queue answers ``True``. With ``delay`` (seconds) or
        ``run_at`` (a datetime) the job waits until then; with ``timeout`` (seconds) it fails
        with :class:`~varmq.JobTimeoutError` if it runs longer (instead of the worker's
        ``timeout``). With ``strict``, a refusal raises :class:`~varmq.EnqueueError` instead of
        giving ``None``.
        """
        if job_id is None and delay is None and run_at is None and timeout is None:
            if self._plain:
                return self._add_plain(data, None, strict)  # the common add, unchecked
            return self._add(data, None, None, 0.0, strict, None)
        return self._add(
            data, None, job_id_of(job_id), delay_of(delay, run_at), strict, timeout_of(timeout)
        )

    async def add_async(
        self,
        data: T,
        *,
        job_id: str | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
        timeout: float | None = None,
        strict: bool = False,
    ) -> H | None:
        """:meth:`add` for asyncio code (an in-memory add never blocks)."""
        return self.add(
            data, job_id=job_id, delay=delay, run_at=run_at, timeout=timeout, strict=strict
        )

    def add_all(self, items: Iterable[Item[T] | T]) -> G:
        """Add several jobs (``Item`` or bare data); a handle tracking them together.

        An item whose id a job of the queue holds (see :meth:`add`) is not added: the handle
        counts it as done at once, and leaves it out of its ``jobs``."""
        return self._add_all(items, False)


class PriorityQueue(_MemoryHandle[T, H, G, W]):
    """A priority queue bound to a worker: lower ``priority`` runs first."""

    def add(
        self,
        data: T,
        priority: int = 0,
        *,
        job_id: str | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
        timeout: float | None = None,
        strict: bool = False,
    ) -> H | None:
        """Add a job with ``priority``; its handle, or ``None`` when refused (``strict``:
        :class:`~varmq.EnqueueError`). Other arguments as for :meth:`Queue.add`."""
        if (
            type(priority) is int
            and job_id is None
            and delay is None
            and run_at is None
            and timeout is None
            and self._plain
        ):
            return self._add_plain(data, priority, strict)  # the common add: nothing to check
        return self._add(
            data,
            priority_of(priority),
            job_id_of(job_id),
            delay_of(delay, run_at),
            strict,
            timeout_of(timeout),
        )

    async def add_async(
        self,
        data: T,
        priority: int = 0,
        *,
        job_id: str | None = None,
        delay: float | None = None,
        run_at: datetime | None = None,
        timeout: float | None = None,
        strict: bool = False,
    ) -> H | None:
        """:meth:`add` for asyncio code (an in-memory add never blocks)."""
        return self.add(
            data,
            priority,
            job_id=job_id,
            delay=delay,
            run_at=run_at,
            timeout=timeout,
            strict=strict,
        )

    def add_all(self, items: Iterable[Item[T] | T]) -> G:
        """Add several jobs, each with its ``Item.priority``; a handle tracking them. Items
        whose id the queue holds are not added, as for :meth:`Queue.add_all`."""
        return self._add_all(items, True)
