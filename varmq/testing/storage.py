"""The reference storage: every storage protocol, in memory, with a clock and faults you control.

This is the example an adapter author copies, and the storage the core's tests run the worker on.
It keeps jobs in Python objects only: no I/O, no threads, no third-party code. Open queues the way
you open them on ``sqliteq`` or ``redisq``::

    storage = MemoryStorage(clock=FakeClock())
    q = storage.new_queue("emails", visibility_timeout=30.0)
    q.enqueue(b"...")
    item, ack_id = q.dequeue_with_ack_id()
    q.acknowledge(ack_id)

Two queue objects opened with the same name on one storage share their jobs, the way two
processes share a Redis key or a SQLite file. A lease expires when the clock reaches its deadline;
the next call on that queue puts the job back where it was (same priority, same place in line),
so no thread is needed. Delayed jobs (``enqueue_delayed``, ``nack`` with a delay) become due the
same way: the next call moves them into line. ``FakeClock`` lets a test move time by hand; the
default clock is ``time.monotonic``.

Retries follow the semantics written in ``varmq.contract.protocols``: ``nack(ack_id, delay)`` gives
a job back, ``dead_letter(ack_id, error)`` shelves it for an operator (``dead_letters``,
``requeue_dead``, ``purge_dead``), and ``stats()`` counts what is where. ``list_queues()`` and
``open_queue(name)`` on the storage find queues by name, as on ``sqliteq`` and ``redisq``.

Opened with ``keep_results=SECONDS``, a queue keeps job records (``IJobRecords``): every job added
with an id has one (``job_record``), settles can carry its outcome (``acknowledge_with_results``,
``fail``, ``dead_letter_with_error``), ``cancel`` removes or flags it, ``extend_lease_or_cancel``
tells its consumer, and ``subscribe_records`` hears ends. ``set_progress`` keeps a running job's
progress in its record (``IJobProgress``), fenced by its lease; every take clears it. The
bookkeeping is in ``varmq.testing._records``; every transition happens under the same lock as
the job's own.

Every opener goes through one method, ``MemoryStorage._open``, and every argument is checked by
the rules of ``varmq.contract.protocols`` ("Arguments and options") in ``varmq.contract.rules``, the
module an adapter copies to check its arguments the same way.

Each queue object has a ``faults`` attribute (:class:`Faults`) whose switches make it fail the
way a broken storage would, so tests can watch the worker cope.

``topics()`` gives the storage's topics (``varmq.testing.storage_topics``): bindings every
topics object of the storage honours, copies stored in one step, and live subscribers.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import logging
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeVar

from typing_extensions import Unpack

from varmq.contract import stored_settings
from varmq.contract.protocols import (
    DEFAULT_DEAD_LETTER_LIMIT,
    DEFAULT_DEAD_LETTER_MAX_AGE,
    DEFAULT_TOPIC_DEDUP_TTL,
    DeadLetterRecord,
    LeaseAnswer,
    QueueStats,
    RateStats,
    StoredJobRecord,
)
from varmq.contract.rules import (
    QueueSettings,
    as_bytes,
    check,
    check_job_id,
    check_keys,
    check_name,
    error_text,
    occurrence_mark,
    payload,
    queue_settings,
)
from varmq.contract.workers import WorkerInfo, worker_infos
from varmq.testing._records import Record, RecordBook
from varmq.testing.faults import Faults
from varmq.testing.storage_topics import ReferenceTopics, TopicState, disconnected
from varmq.testing.storage_workers import ReferenceWorkerRegistry

__all__ = [
    "DEAD_LETTER_LIMIT",
    "DEAD_LETTER_MAX_AGE",
    "FakeClock",
    "Faults",
    "ReferenceDistributedPriorityQueue",
    "ReferenceDistributedQueue",
    "ReferencePriorityQueue",
    "ReferenceQueue",
    "MemoryStorage",
]

_log = logging.getLogger("varmq.testing")

Clock = Callable[[], float]
"""A monotonic clock: seconds as a float, never going back."""

DEAD_LETTER_LIMIT = DEFAULT_DEAD_LETTER_LIMIT
"""Default ``dead_letter_limit``: dead letters kept per queue; the oldest beyond it are dropped."""
DEAD_LETTER_MAX_AGE = DEFAULT_DEAD_LETTER_MAX_AGE
"""Default ``dead_letter_max_age``: seconds a dead letter is kept (7 days)."""


class FakeClock:
    """A monotonic clock that moves only when told to: call it for the time, ``advance`` to move."""

    def __init__(self, start: float = 0.0) -> None:
        self._lock = threading.Lock()  # guards _now; it only ever grows
        self._now = start

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward; leases and delays whose time is reached expire."""
        if seconds < 0:
            raise ValueError(f"FakeClock.advance: seconds must be >= 0, got {seconds}")
        with self._lock:
            self._now += seconds


@dataclass
class _Job:
    item: bytes
    priority: int
    seq: int  # storage-wide order of joining a line: the tie-break among equal available_at
    job_id: str | None  # the dedup id given to enqueue_dedup or enqueue_delayed, if any
    available_at: float  # clock reading from which it may be taken (future: delayed)
    deliveries: int = 0
    record: Record | None = None  # its job record, when added with an id and records on

    def line_entry(self) -> tuple[int, float, int, _Job]:
        """Its entry in the ready heap: priority, then availability, then seq."""
        return (self.priority, self.available_at, self.seq, self)


@dataclass
class _Lease:
    job: _Job
    deadline: float


@dataclass
class _DeadLetter:
    key: str
    job: _Job  # priority and job id are kept for requeue_dead
    error: str
    dead_at: float  # Unix seconds, as listed
    died: float  # storage clock reading, for dead_letter_max_age


@dataclass
class _NamedQueue:
    """The jobs stored under one name. Guarded by the owning storage's lock."""

    name: str
    priority: bool
    ready: list[tuple[int, float, int, _Job]] = field(default_factory=list)  # heap, see line_entry
    delayed: list[tuple[float, int, _Job]] = field(default_factory=list)  # heap of (due, seq, job)
    leased: dict[str, _Lease] = field(default_factory=dict)  # ack id -> lease
    dead: dict[str, _DeadLetter] = field(default_factory=dict)  # key -> dead letter, oldest first
    job_ids: set[str] = field(default_factory=set)
    capacity: int = 0  # 0: unlimited
    subscribers: list[tuple[_QueueBase, Callable[[str], None]]] = field(default_factory=list)
    records: RecordBook = field(default_factory=RecordBook)
    record_subscribers: list[tuple[_QueueBase, Callable[[str], None]]] = field(default_factory=list)
    settings: str | None = None  # the defining settings of its first opener (stored_settings)
    marks: dict[str, int] = field(default_factory=dict)  # schedule -> latest occurrence (ms)
    starts: deque[float] = field(default_factory=deque)  # rate_limit: take times in the window


class QueueOptions(TypedDict, total=False):
    """The keyword options of every opener of :class:`MemoryStorage`; all optional.

    Those of every storage (:class:`varmq.contract.rules.QueueOptions`): ``visibility_timeout``
    (seconds a lease lasts, default 30), ``dead_letter_limit`` and ``dead_letter_max_age``
    (dead letters kept per queue, default 10,000, for at most 7 days), ``keep_results`` (seconds
    an ended job's record is kept, default 0: no records), ``keep_results_limit`` (default
    10,000) and ``max_payload`` (default 4 MiB). All but ``visibility_timeout`` define the
    queue: its first opener stores them, later openers inherit them
    (:mod:`varmq.contract.stored_settings`).
    """

    visibility_timeout: float
    dead_letter_limit: int
    dead_letter_max_age: float
    keep_results: float
    keep_results_limit: int
    max_payload: int
    rate_limit: str | tuple[int, float] | None


class MemoryStorage:
    """Named queues in memory; the stand-in for one Redis server or one SQLite file.

    Every ``new_*`` call and ``open_queue`` take the keyword options of :class:`QueueOptions`,
    checked the way every storage checks them (``varmq.contract.protocols``, "Arguments and
    options").
    """

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock if clock is not None else time.monotonic
        # dead_at is listed in Unix seconds, moving with the storage clock (fake or not).
        self._wall_offset = time.time() - self._clock()
        self._lock = threading.Lock()
        # _lock guards every _NamedQueue, _seq and _opened. Invariant while it is free: each
        # stored job is in exactly one place of its named queue (the ready heap, the delayed heap,
        # the leased map or the dead shelf), and a named queue's job_ids are exactly the dedup
        # ids of its jobs that are ready, delayed or leased (dead letters do not block an id).
        # A job's record is in its named queue's book, in the state of the place of its job (or
        # ended, once the job left the queue); a kept record holds its id like job_ids do.
        self._named: dict[str, _NamedQueue] = {}
        self._seq = itertools.count()
        self._opened: list[_QueueBase | ReferenceTopics] = []
        self._topics = TopicState()  # bindings and live subscribers (storage_topics)
        #: The records of the workers consuming its queues (storage_workers).
        self.worker_registry = ReferenceWorkerRegistry(self._wall)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {len(self._named)} queues>"

    @property
    def location(self) -> str:
        """Where the queues are, for messages: always ``"memory storage"``."""
        return "memory storage"

    def new_queue(self, name: str, **options: Unpack[QueueOptions]) -> ReferenceQueue:
        """Open the FIFO queue ``name``, creating it if needed."""
        return self._open(ReferenceQueue, name, options)

    def new_priority_queue(
        self, name: str, **options: Unpack[QueueOptions]
    ) -> ReferencePriorityQueue:
        """Open the priority queue ``name`` (lower numbers first, FIFO among equals)."""
        return self._open(ReferencePriorityQueue, name, options)

    def new_distributed_queue(
        self, name: str, **options: Unpack[QueueOptions]
    ) -> ReferenceDistributedQueue:
        """Open the FIFO queue ``name`` with ``subscribe``."""
        return self._open(ReferenceDistributedQueue, name, options)

    def new_distributed_priority_queue(
        self, name: str, **options: Unpack[QueueOptions]
    ) -> ReferenceDistributedPriorityQueue:
        """Open the priority queue ``name`` with ``subscribe``."""
        return self._open(ReferenceDistributedPriorityQueue, name, options)

    def list_queues(self) -> list[tuple[str, str]]:
        """``(name, kind)`` of every queue ever opened on this storage, by name.

        ``kind`` is ``"fifo"`` or ``"priority"``.
        """
        with self._lock:
            named = sorted(self._named.values(), key=lambda n: n.name)
        return [(n.name, "priority" if n.priority else "fifo") for n in named]

    def open_queue(
        self, name: str, **options: Unpack[QueueOptions]
    ) -> ReferenceDistributedQueue | ReferenceDistributedPriorityQueue:
        """Open the existing queue ``name`` as its own kind, with ``subscribe``.

        Raises ``LookupError`` naming the queue when nothing was ever opened under ``name``.
        """
        with self._lock:
            named = self._named.get(check_name(self.location, name))
        if named is None:
            raise LookupError(
                f"memory storage: no queue named {name!r}; create it with new_queue() or"
                f" new_priority_queue() first (list_queues() shows the names)"
            )
        if named.priority:
            return self._open(ReferenceDistributedPriorityQueue, name, options, offer=False)
        return self._open(ReferenceDistributedQueue, name, options, offer=False)

    def topics(self, *, dedup_ttl: float = DEFAULT_TOPIC_DEDUP_TTL) -> ReferenceTopics:
        """The topics of this storage (``IStorageTopics`` and ``ILiveTopics``): every topics
        object of one storage shares its bindings and kept message ids, as processes sharing
        a store do. ``dedup_ttl``: seconds a message id it publishes is kept (0: none)."""
        topics = ReferenceTopics(self, self._topics, Faults(), dedup_ttl)
        with self._lock:
            self._opened.append(topics)
        return topics

    def workers(self) -> list[WorkerInfo]:
        """Every worker consuming a queue of this storage, living ones first, then those gone
        for less than an hour (``alive=False``)."""
        return worker_infos(self.worker_registry.worker_records())

    def disconnect_subscribers(self) -> contextlib.AbstractContextManager[None]:
        """Take the live topic subscribers' connection away inside the ``with`` block: they
        miss what is published meanwhile, and reconnect on leaving it (counting both)."""
        return disconnected(self, self._topics)

    def _store_locked(self, queue: str, item: bytes, job_id: str | None, now: float) -> bool:
        """Put ``item`` last in the line of the named queue ``queue`` (made a FIFO queue if
        new), available at ``now``; ``False`` when a job with ``job_id`` is stored already.
        Holds _lock."""
        named = self._named.setdefault(queue, _NamedQueue(queue, False))
        if job_id is not None and job_id in named.job_ids:
            return False
        heapq.heappush(named.ready, _Job(item, 0, next(self._seq), job_id, now).line_entry())
        if job_id is not None:
            named.job_ids.add(job_id)
        return True

    @contextlib.contextmanager
    def outage(self, error: BaseException | None = None) -> Iterator[None]:
        """Make every queue of this storage unable to answer inside the ``with`` block.

        Each call that would reach the storage raises ``error`` (default
        ``ConnectionError("memory storage: down")``), as :attr:`Faults.unreachable` does for
        one queue object; leases keep running out meanwhile.
        """
        down = error if error is not None else ConnectionError("memory storage: down")
        with self._lock:
            queues = list(self._opened)
        for queue in queues:
            queue.faults.unreachable = down
        try:
            yield
        finally:
            for queue in queues:
                queue.faults.unreachable = None

    def close(self) -> None:
        """Close every queue object opened on this storage. The jobs stay."""
        with self._lock:
            opened, self._opened = self._opened, []
        for q in opened:
            q.close()

    def _open(
        self, kind: type[_Q], name: str, options: Mapping[str, Any], *, offer: bool = True
    ) -> _Q:
        """The one opener: check the name and options, find or make the named queue, settle
        its defining settings (stored by the first opener that offers them)."""
        check_name(self.location, name)
        subject = f"memory storage: queue {name!r}"
        offered = queue_settings(subject, options)
        priority = issubclass(kind, ReferencePriorityQueue)
        with self._lock:
            named = self._named.setdefault(name, _NamedQueue(name, priority))
            if offer and named.settings is None and named.priority == priority:
                named.settings = stored_settings.encode(offered)
            stored = named.settings
        if named.priority != priority:
            was = "priority" if named.priority else "FIFO"
            raise ValueError(f"memory storage: queue {name!r} is a {was} queue; open it as one")
        return kind(self, named, stored_settings.settle(subject, options, offered, stored))

    def _wall(self) -> float:
        """Unix seconds, moving with the storage clock."""
        return self._wall_offset + self._clock()


_Q = TypeVar("_Q", bound="_QueueBase")


class _QueueBase:
    """Everything a queue object does except ``enqueue`` (whose shape depends on the kind)."""

    def __init__(self, storage: MemoryStorage, named: _NamedQueue, settings: QueueSettings) -> None:
        self.faults = Faults()
        self._storage = storage
        self._named = named
        self._subject = f"memory storage: queue {named.name!r}"  # starts every error message
        self._lease_seconds = float(settings.visibility_timeout)
        self._dead_letter_limit = settings.dead_letter_limit
        self._dead_letter_max_age = float(settings.dead_letter_max_age)
        self._keep_results = float(settings.keep_results)
        self._keep_results_limit = settings.keep_results_limit
        self._max_payload = settings.max_payload
        self._rate_limit = settings.rate_limit
        self._throttled_for = 0.0  # what the last take through this object saw
        self._lock = storage._lock  # one lock per storage; see MemoryStorage.__init__
        self._closed = False  # written under _lock
        with self._lock:
            storage._opened.append(self)

    @property
    def name(self) -> str:
        """The queue's name in its storage."""
        return self._named.name

    @property
    def worker_registry(self) -> ReferenceWorkerRegistry:
        """The records of the workers of the storage (``IHasWorkerRegistry``)."""
        return self._storage.worker_registry

    @property
    def lease_seconds(self) -> float:
        """How long a lease lasts after a take or an extension (the visibility timeout)."""
        return self._lease_seconds

    @property
    def keep_results(self) -> float:
        """Seconds an ended job's record is kept; ``0.0``: this object keeps no records."""
        return self._keep_results

    @property
    def rate_limit(self) -> tuple[int, float] | None:
        """``(count, seconds)``: at most ``count`` jobs start in any window of ``seconds``."""
        return self._rate_limit

    def throttled_for(self) -> float:
        """Seconds until the rate window lets another job start, as the last take saw it."""
        return self._throttled_for

    def _window_locked(self, now: float) -> tuple[int, float]:
        """``rate_limit``: the starts the window has left at ``now``, and when its oldest
        start leaves it. Holds _lock."""
        assert self._rate_limit is not None
        count, seconds = self._rate_limit
        starts = self._named.starts
        while starts and starts[0] <= now - seconds:
            starts.popleft()
        return count - len(starts), (starts[0] + seconds if starts else now)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the storage's lock; after it, tell record subscribers of the records that ended
        meanwhile (outside the lock: a callback may call back into the storage)."""
        with self._lock:
            yield
            book = self._named.records
            ended, book.news = book.news, []
            callbacks = [cb for _, cb in self._named.record_subscribers] if ended else []
        for job_id in ended:
            for callback in callbacks:
                try:
                    callback(job_id)
                except Exception:
                    _log.warning(
                        "queue %r: a record subscriber raised; ignored", self.name, exc_info=True
                    )

    # -- adding ------------------------------------------------------------------------------

    def enqueue_dedup(self, item: bytes | str, job_id: str, priority: int | None = None) -> bool:
        """Store ``item`` unless a job with ``job_id`` is stored (waiting, delayed or in flight).

        ``True`` in both cases, ``False`` when refused. FIFO queues ignore ``priority``; a
        priority queue takes ``None`` as 0.
        """
        job_id = check_job_id(self._subject, job_id)
        return self._put(item, self._priority(priority, optional=True), job_id)

    def enqueue_delayed(
        self,
        item: bytes | str,
        delay: float,
        job_id: str | None = None,
        priority: int | None = None,
    ) -> bool:
        """Store ``item``; it is handed out no sooner than ``delay`` seconds from now.

        Once due, it joins the end of its priority's line (at its due time). ``delay <= 0``
        means now. With a ``job_id``, deduplicates like ``enqueue_dedup``. FIFO queues ignore
        ``priority``. ``False`` when refused (closed, full, fault).
        """
        data = as_bytes(self._subject, item)
        rank = self._priority(priority, optional=True)
        if job_id is not None:
            job_id = check_job_id(self._subject, job_id)
        return self._put(data, rank, job_id, self._delay(delay))

    def enqueue_occurrence(
        self,
        item: bytes | str,
        job_id: str,
        schedule: str,
        occurrence: float,
        priority: int | None = None,
    ) -> bool:
        """``enqueue_dedup`` unless the mark of ``schedule`` is at or after ``occurrence``; the
        mark moved to it in the same step (``IScheduleMarks``)."""
        job_id = check_job_id(self._subject, job_id)
        mark = occurrence_mark(self._subject, schedule, occurrence)
        return self._put(item, self._priority(priority, optional=True), job_id, mark=mark)

    async def enqueue_dedup_async(
        self, item: bytes | str, job_id: str, priority: int | None = None
    ) -> bool:
        """``enqueue_dedup`` for a coroutine (``IAsyncEnqueue``): memory never blocks a loop."""
        return self.enqueue_dedup(item, job_id, priority)

    async def enqueue_delayed_async(
        self,
        item: bytes | str,
        delay: float,
        job_id: str | None = None,
        priority: int | None = None,
    ) -> bool:
        """``enqueue_delayed`` for a coroutine (``IAsyncEnqueue``)."""
        return self.enqueue_delayed(item, delay, job_id, priority)

    def set_capacity(self, capacity: int) -> None:
        """Refuse enqueues into this name once ``capacity`` jobs wait (0: unlimited).

        Delayed and in-flight jobs do not count; delayed enqueues are refused like the others.
        """
        check(self._subject, "capacity", capacity)
        with self._lock:
            self._named.capacity = capacity

    def _priority(self, priority: Any, *, optional: bool) -> int:
        """The checked priority to store: FIFO queues store 0 whatever they are given."""
        if not self._named.priority or (optional and priority is None):
            return 0  # a FIFO queue is a priority queue where everyone is equal
        return int(check(self._subject, "priority", priority))

    def _delay(self, delay: Any) -> float:
        """The checked delay in seconds, rounded up to whole milliseconds as stores keep it."""
        seconds = check(self._subject, "delay", delay)
        return math.ceil(seconds * 1000) / 1000 if seconds > 0 else 0.0

    def _put(
        self,
        item: Any,
        priority: int,
        job_id: str | None,
        delay: float = 0,
        mark: tuple[str, int] | None = None,
    ) -> bool:
        self.faults.reach()
        data = payload(self._subject, item, self._max_payload)
        if self.faults.refuse_enqueue:
            return False
        with self._locked():
            named = self._named
            if self._closed:
                return False
            self._catch_up()
            if mark is not None:
                schedule, at = mark
                if named.marks.get(schedule, at - 1) >= at:
                    return True  # that occurrence, or a later one, was added already
            if job_id is not None and (job_id in named.job_ids or named.records.holds(job_id)):
                if mark is not None:
                    named.marks[mark[0]] = mark[1]
                return True  # already stored (or its record is kept): the job is there
            if named.capacity and len(named.ready) >= named.capacity:
                return False
            if mark is not None:
                named.marks[mark[0]] = mark[1]
            now = self._storage._clock()
            job = _Job(data, priority, next(self._storage._seq), job_id, now + delay)
            self._line_up(job, now)
            if job_id is not None:
                named.job_ids.add(job_id)
                if self._keep_results > 0:
                    state = "delayed" if job.available_at > now else "queued"
                    job.record = named.records.create(
                        job_id, state, self._keep_results, self._storage._wall()
                    )
            subscribers = [] if delay > 0 else [callback for _, callback in named.subscribers]
        self._notify(subscribers)
        return True

    def _line_up(self, job: _Job, now: float) -> None:
        """Put ``job`` in line, or among the delayed when it is not due. Caller holds _lock."""
        if job.available_at > now:
            heapq.heappush(self._named.delayed, (job.available_at, job.seq, job))
        else:
            heapq.heappush(self._named.ready, job.line_entry())

    def _notify(self, subscribers: list[Callable[[str], None]]) -> None:
        for callback in subscribers:  # outside the lock: a callback may call back into us
            try:
                callback("enqueued")
            except Exception:
                _log.warning("queue %r: a subscriber raised; ignored", self.name, exc_info=True)

    def _subscribe(self, callback: Callable[[str], None]) -> None:
        with self._lock:
            if not self._closed:
                self._named.subscribers.append((self, callback))

    # -- taking ------------------------------------------------------------------------------

    def dequeue(self) -> bytes | None:
        """Take the next job for good, without a lease; ``None`` when there is none."""
        self.faults.reach()
        self._raise_take_fault()
        with self._locked():
            if self._closed:
                return None
            self._catch_up()
            if not self._named.ready:
                return None
            if self._rate_limit is not None:
                now = self._storage._clock()
                left, opens = self._window_locked(now)
                self._throttled_for = opens - now if left <= 0 else 0.0
                if left <= 0:
                    return None
                self._named.starts.append(now)
            job = heapq.heappop(self._named.ready)[-1]
            self._named.job_ids.discard(job.job_id or "")
            job.deliveries += 1
            self._started(job)
            self._end(job, "succeeded")  # taken for good: nobody will report an outcome
            return job.item

    def dequeue_with_ack_id(self) -> tuple[bytes, str] | None:
        """Take and lease the next job; ``None`` when there is none."""
        taken = self._take(1)
        return (taken[0][0], taken[0][1]) if taken else None

    def dequeue_batch_with_ack_ids(self, n: int) -> list[tuple[bytes, str]]:
        """Take and lease up to ``n`` jobs in one step, each with its own ack id."""
        return [(item, ack_id) for item, ack_id, _ in self._take(n)]

    def dequeue_batch_with_attempts(self, n: int) -> list[tuple[bytes, str, int]]:
        """Like ``dequeue_batch_with_ack_ids``, with each job's delivery count (1 at first)."""
        return self._take(n)

    def _take(self, n: int) -> list[tuple[bytes, str, int]]:
        self.faults.reach()
        check(self._subject, "n", n)
        self._raise_take_fault()
        with self._locked():
            if self._closed:
                return []
            self._catch_up()
            now = self._storage._clock()
            deadline = now + self._lease_seconds
            taken: list[tuple[bytes, str, int]] = []
            if self._rate_limit is not None:
                left, opens = self._window_locked(now)
                n = min(n, left)
            while self._named.ready and len(taken) < n:
                job = heapq.heappop(self._named.ready)[-1]
                job.deliveries += 1
                ack_id = uuid.uuid4().hex  # fresh per delivery: a stale one never matches
                self._named.leased[ack_id] = _Lease(job, deadline)
                self._started(job)
                taken.append((job.item, ack_id, job.deliveries))
            if self._rate_limit is not None:
                self._named.starts.extend([now] * len(taken))
                left, opens = self._window_locked(now)
                self._throttled_for = opens - now if left <= 0 else 0.0
            return taken

    def _raise_take_fault(self) -> None:
        error = self.faults.take_error
        if error is not None:
            raise error.with_traceback(None)

    # -- finishing ---------------------------------------------------------------------------

    def acknowledge(self, ack_id: str) -> bool:
        """Forget the job leased under ``ack_id``; ``False`` if unknown, expired or refused."""
        return self.acknowledge_many([ack_id])[0]

    def acknowledge_many(self, ack_ids: Sequence[str]) -> list[bool]:
        """Acknowledge each id in order, in one step; one result per id.

        A job with a record is recorded ``"succeeded"``, with no result.
        """
        return self._acknowledge([(ack_id, None) for ack_id in ack_ids])

    def acknowledge_with_results(self, results: Sequence[tuple[str, Any]]) -> list[bool]:
        """Acknowledge each ``(ack_id, result)`` in one step, recording each job ``"succeeded"``
        with its ``result`` bytes; one answer per pair, as ``acknowledge_many`` gives."""
        self.faults.reach()
        checked = [(ack_id, as_bytes(self._subject, r, "result")) for ack_id, r in results]
        return self._acknowledge(checked)

    def _acknowledge(self, settled: Sequence[tuple[str, bytes | None]]) -> list[bool]:
        self.faults.reach()
        if self.faults.refuse_ack:
            return [False] * len(settled)
        with self._locked():
            self._catch_up()
            answers = []
            for ack_id, result in settled:
                lease = self._unlease(ack_id)
                if lease is not None:
                    self._named.job_ids.discard(lease.job.job_id or "")
                    self._end(lease.job, "succeeded", result=result)
                answers.append(lease is not None)
            return answers

    def fail(self, ack_id: str, error: Any) -> bool:
        """End the job leased under ``ack_id`` for good, recording it ``"failed"`` with the
        ``error`` bytes (``"cancelled"`` when a cancel was requested).

        ``False`` when the lease is unknown, expired, taken over, or refused (``refuse_ack``).
        Works after ``close()``, like ``acknowledge``.
        """
        self.faults.reach()
        detail = as_bytes(self._subject, error, "error")
        if self.faults.refuse_ack:
            return False
        with self._locked():
            if (lease := self._take_back(ack_id)) is None:
                return False
            self._named.job_ids.discard(lease.job.job_id or "")
            self._end(lease.job, "failed", error=detail)
            return True

    def extend_lease(self, ack_id: str) -> bool:
        """Restart the lease of ``ack_id``; ``False`` when it expired, is unknown, or refused."""
        return self.extend_lease_or_cancel(ack_id) != "lost"

    def extend_lease_or_cancel(self, ack_id: str) -> LeaseAnswer:
        """``extend_lease`` that also tells whether a cancel was requested for the job:
        ``"held"``, ``"cancel"`` (extended all the same) or ``"lost"``."""
        self.faults.reach()
        if self.faults.refuse_extend:
            return "lost"
        with self._locked():
            self._catch_up()
            lease = self._named.leased.get(ack_id) if isinstance(ack_id, str) else None
            if lease is None:
                return "lost"
            lease.deadline = self._storage._clock() + self._lease_seconds
            record = lease.job.record
            return "cancel" if record is not None and record.cancel_requested else "held"

    def release(self, ack_id: str) -> bool:
        """Give back the job leased under ``ack_id``, never started: at once, where it was.

        It goes back to its place in line (its priority, availability and order, as if its
        lease had expired) and this delivery does not count: the next take reports the same
        attempt again. ``False`` when the lease is unknown, expired or taken over. Works after
        ``close()``, like ``acknowledge``.
        """
        self.faults.reach()
        with self._locked():
            if (lease := self._take_back(ack_id)) is None:
                return False
            job = lease.job
            job.deliveries -= 1
            if self._cancelled(job):
                return True
            heapq.heappush(self._named.ready, job.line_entry())
            self._lined_up(job)
            subscribers = [callback for _, callback in self._named.subscribers]
        self._notify(subscribers)
        return True

    def nack(self, ack_id: str, delay: float) -> bool:
        """Give the job leased under ``ack_id`` back, to be taken again after ``delay`` seconds.

        It keeps its priority and delivery count, and joins the end of its line when due
        (``delay <= 0``: now). ``False`` when the lease is unknown, expired, taken over, or
        refused. Works after ``close()``, like ``acknowledge``.
        """
        self.faults.reach()
        wait = self._delay(delay)
        if self.faults.refuse_nack:
            return False
        with self._locked():
            if (lease := self._take_back(ack_id)) is None:
                return False
            now = self._storage._clock()
            job = lease.job
            if self._cancelled(job):
                return True
            job.seq = next(self._storage._seq)  # end of line, even at the same clock reading
            job.available_at = now + wait
            self._line_up(job, now)
            self._lined_up(job)
            return True

    def dead_letter(self, ack_id: str, error: str) -> bool:
        """Move the job leased under ``ack_id`` to the dead letters, with ``error``.

        ``False`` when the lease is unknown, expired, taken over, or refused. Drops the dead
        letters beyond this object's ``dead_letter_limit`` and older than its
        ``dead_letter_max_age`` in the same step. Works after ``close()``, like ``acknowledge``.
        A job with a record is recorded ``"dead"`` with no error bytes; one whose cancel was
        requested is ended ``"cancelled"`` instead of shelved.
        """
        return self._bury(ack_id, error, None)

    def dead_letter_with_error(self, ack_id: str, error: str, record_error: Any) -> bool:
        """``dead_letter`` that also records ``record_error`` (bytes) in the job's record."""
        self.faults.reach()
        detail = as_bytes(self._subject, record_error, "record_error")
        return self._bury(ack_id, error, detail)

    def _bury(self, ack_id: str, error: str, detail: bytes | None) -> bool:
        self.faults.reach()
        if self.faults.refuse_dead_letter:
            return False
        with self._locked():
            if (lease := self._take_back(ack_id)) is None:
                return False
            job = lease.job
            self._named.job_ids.discard(job.job_id or "")
            if self._cancelled(job):
                return True
            key = uuid.uuid4().hex
            now = self._storage._clock()
            letter = _DeadLetter(key, job, error_text(error), self._storage._wall(), now)
            self._named.dead[key] = letter
            self._prune_dead(now)
            self._end(job, "dead", error=detail)
            return True

    def _prune_dead(self, now: float) -> None:
        """Drop dead letters over the age limit, then the oldest over the count. Holds _lock."""
        dead = self._named.dead
        oldest_kept = now - self._dead_letter_max_age
        while dead:
            key, letter = next(iter(dead.items()))  # oldest first: insertion order
            if len(dead) <= self._dead_letter_limit and letter.died >= oldest_kept:
                break
            del dead[key]

    def _take_back(self, ack_id: object) -> _Lease | None:
        """Catch up with the clock, then remove the lease held under ``ack_id``. Holds _lock."""
        self._catch_up()
        return self._unlease(ack_id)

    def _unlease(self, ack_id: object) -> _Lease | None:
        """Remove and return the lease held under ``ack_id``; ``None`` if none. Holds _lock."""
        return self._named.leased.pop(ack_id, None) if isinstance(ack_id, str) else None

    def _catch_up(self) -> None:
        """Bring the named queue up to the clock. Caller holds _lock.

        Every job whose lease deadline is reached goes back in line where it was (its original
        priority, availability and seq); every delayed job that is due joins its line at its due
        time.
        """
        now = self._storage._clock()
        named = self._named
        for ack_id in [a for a, lease in named.leased.items() if lease.deadline <= now]:
            job = named.leased.pop(ack_id).job
            if self._cancelled(job):
                named.job_ids.discard(job.job_id or "")
                continue  # its consumer is gone and nobody wants it run again
            heapq.heappush(named.ready, job.line_entry())
            self._lined_up(job)
        while named.delayed and named.delayed[0][0] <= now:
            job = heapq.heappop(named.delayed)[-1]
            heapq.heappush(named.ready, job.line_entry())
            self._lined_up(job)
        named.records.prune(now)

    # -- records -----------------------------------------------------------------------------

    def _started(self, job: _Job) -> None:
        """``job`` was just taken: its record is running. Holds _lock."""
        record = job.record
        if record is not None:
            record.state = "running"
            record.attempts = job.deliveries
            record.started_at = self._storage._wall()
            record.progress = None  # a new attempt starts without progress

    def _lined_up(self, job: _Job) -> None:
        """``job`` is back in line, or delayed: so is its record. Holds _lock."""
        record = job.record
        if record is not None:
            record.state = "delayed" if job.available_at > self._storage._clock() else "queued"
            record.attempts = job.deliveries

    def _end(
        self, job: _Job, state: str, result: bytes | None = None, error: bytes | None = None
    ) -> None:
        """``job`` left the queue for good in ``state``: its record ends. Holds _lock."""
        record = job.record
        if record is None:
            return
        if state == "failed" and record.cancel_requested:
            state = "cancelled"
        self._named.records.end(
            record,
            state,
            now=self._storage._clock(),
            wall=self._storage._wall(),
            limit=self._keep_results_limit,
            result=result,
            error=error,
        )

    def _cancelled(self, job: _Job) -> bool:
        """End ``job`` as cancelled if a cancel was requested for it (it was leased and is
        being given back); whether it was. Holds _lock."""
        record = job.record
        if record is None or not record.cancel_requested:
            return False
        self._named.job_ids.discard(job.job_id or "")
        self._end(job, "cancelled")
        return True

    def job_record(self, job_id: str) -> StoredJobRecord | None:
        """The record of ``job_id``, or ``None`` when none is kept (whatever this object's own
        ``keep_results``: records belong to the queue)."""
        self.faults.reach()
        job_id = check_job_id(self._subject, job_id)
        with self._locked():
            self._catch_up()
            record = self._named.records.get(job_id)
            return None if record is None else record.stored()

    def set_progress(self, ack_id: str, progress: Any) -> bool:
        """Keep ``progress`` (bytes) as the progress of the record of the job leased under
        ``ack_id``, changing nothing else. ``False`` (nothing kept) when the lease is unknown,
        expired or taken over, or the job has no record. Works after ``close()``."""
        self.faults.reach()
        kept = as_bytes(self._subject, progress, "progress")
        with self._locked():
            self._catch_up()
            lease = self._named.leased.get(ack_id) if isinstance(ack_id, str) else None
            record = None if lease is None else lease.job.record
            if record is None or record.ended:
                return False
            record.progress = kept
            return True

    def cancel(self, job_id: str) -> bool:
        """Cancel ``job_id``: a queued or delayed job is removed now (``"cancelled"``), a running
        one is flagged for its consumer. Whether there was a job to cancel (a job with a kept
        record, whatever this object's own ``keep_results``)."""
        self.faults.reach()
        job_id = check_job_id(self._subject, job_id)
        with self._locked():
            self._catch_up()
            named = self._named
            record = named.records.get(job_id)
            if record is None or record.ended:
                return False
            if record.state == "running":
                record.cancel_requested = True
                return True
            job = self._out_of_line(record)
            if job is None:
                return False  # not reached: a queued or delayed record has its job in line
            named.job_ids.discard(job_id)
            self._end(job, "cancelled")
            return True

    def _out_of_line(self, record: Record) -> _Job | None:
        """Remove the job of ``record`` from the ready or the delayed heap. Holds _lock."""
        named = self._named
        for index, entry in enumerate(named.ready):
            if entry[-1].record is record:
                named.ready.pop(index)
                heapq.heapify(named.ready)
                return entry[-1]
        for index, due in enumerate(named.delayed):
            if due[-1].record is record:
                named.delayed.pop(index)
                heapq.heapify(named.delayed)
                return due[-1]
        return None

    def subscribe_records(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(job_id)`` after a record of this name ended, through any object."""
        with self._lock:
            if not self._closed:
                self._named.record_subscribers.append((self, callback))

    # -- dead letters --------------------------------------------------------------------------

    def dead_letters(self, limit: int = 100) -> list[DeadLetterRecord]:
        """Up to ``limit`` dead letters, oldest first; ``dead_at`` in Unix seconds."""
        self.faults.reach()
        check(self._subject, "limit", limit)
        with self._lock:
            letters = list(itertools.islice(self._named.dead.values(), limit))
            return [
                {
                    "key": letter.key,
                    "item": letter.job.item,
                    "attempts": letter.job.deliveries,
                    "error": letter.error,
                    "dead_at": letter.dead_at,
                }
                for letter in letters
            ]

    def requeue_dead(self, keys: Sequence[str] | None = None) -> int:
        """Put the dead letters ``keys`` (all when ``None``) back in line; how many.

        Each joins the end of its priority's line now, with its delivery count reset (the next
        take is attempt 1). Unknown keys are ignored. A requeued job gets its dedup id back
        unless another stored job holds it meanwhile. ``0`` once this object is closed.
        """
        self.faults.reach()
        chosen_keys = check_keys(self._subject, keys)
        with self._locked():
            if self._closed:
                return 0
            self._catch_up()
            named = self._named
            wanted = named.dead if chosen_keys is None else dict.fromkeys(chosen_keys)
            chosen = [key for key in list(wanted) if key in named.dead]
            now = self._storage._clock()
            for key in chosen:
                job = named.dead.pop(key).job
                job.deliveries = 0
                job.seq = next(self._storage._seq)
                job.available_at = now
                if job.job_id is not None:
                    kept = named.records.get(job.job_id)
                    if job.job_id in named.job_ids or (kept and kept is not job.record):
                        job.job_id = None  # another job holds the id now; this one is extra
                        job.record = None
                    else:
                        named.job_ids.add(job.job_id)
                        self._requeued(job)
                heapq.heappush(named.ready, job.line_entry())
            subscribers = [callback for _, callback in named.subscribers] if chosen else []
        self._notify(subscribers)
        return len(chosen)

    def _requeued(self, job: _Job) -> None:
        """``job`` (with an id) came back from the dead letters: its record is queued again,
        or made anew when it was dropped meanwhile. Holds _lock."""
        assert job.job_id is not None
        book, wall = self._named.records, self._storage._wall()
        if job.record is not None and book.get(job.job_id) is job.record:
            book.revive(job.record, wall)
        elif self._keep_results > 0:
            job.record = book.create(job.job_id, "queued", self._keep_results, wall)
        else:
            job.record = None

    def purge_dead(self) -> int:
        """Delete every dead letter of this name; how many. ``0`` once this object is closed."""
        self.faults.reach()
        with self._locked():
            if self._closed:
                return 0
            count = len(self._named.dead)
            self._named.dead.clear()
            return count

    # -- looking and tidying -----------------------------------------------------------------

    def __len__(self) -> int:
        """Jobs waiting to be taken (not in flight, not delayed); 0 once this object is closed."""
        self.faults.reach()
        with self._locked():
            if self._closed:
                return 0
            self._catch_up()
            return len(self._named.ready)

    def values(self) -> list[bytes]:
        """The waiting jobs in the order they would be taken; ``[]`` once closed."""
        self.faults.reach()
        with self._locked():
            if self._closed:
                return []
            self._catch_up()
            return [entry[-1].item for entry in sorted(self._named.ready)]

    def stats(self) -> QueueStats:
        """Counts of this name's jobs: ``waiting``, ``in_flight``, ``delayed``, ``dead``, and
        ``oldest_age``, the seconds since the oldest waiting job became available (0.0 if none).

        Reads the storage, so it keeps working after ``close()``.
        """
        self.faults.reach()
        with self._locked():
            self._catch_up()
            named = self._named
            now = self._storage._clock()
            oldest = min((entry[1] for entry in named.ready), default=now)
            stats: RateStats = {
                "waiting": len(named.ready),
                "in_flight": len(named.leased),
                "delayed": len(named.delayed),
                "dead": len(named.dead),
                "oldest_age": max(0.0, now - oldest),
            }
            if self._rate_limit is not None:
                left, _ = self._window_locked(now)
                stats["rate_window_used"] = self._rate_limit[0] - left
                stats["throttled"] = left <= 0 and bool(named.ready)
            return stats

    def purge(self) -> None:
        """Remove every waiting job; jobs in flight stay leased, delayed jobs stay delayed.

        The records of the removed jobs end ``"cancelled"``. Does nothing once closed.
        """
        self.faults.reach()
        with self._locked():
            if self._closed:
                return
            self._catch_up()
            for entry in self._named.ready:
                self._named.job_ids.discard(entry[-1].job_id or "")
                self._end(entry[-1], "cancelled")
            self._named.ready.clear()

    def close(self) -> None:
        """Refuse enqueues and hand nothing out from now on; acks, extensions, nacks and dead
        letters of jobs taken before still work."""
        with self._lock:
            self._closed = True
            named = self._named
            named.subscribers = [(q, cb) for q, cb in named.subscribers if q is not self]
            named.record_subscribers = [
                (q, cb) for q, cb in named.record_subscribers if q is not self
            ]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class ReferenceQueue(_QueueBase):
    """A FIFO queue: implements ``IPersistentQueue`` and every extension protocol."""

    def enqueue(self, item: bytes | str) -> bool:
        """Store ``item`` last in line; ``False`` when refused (closed, full, fault)."""
        return self._put(item, 0, None)

    async def enqueue_async(self, item: bytes | str) -> bool:
        """``enqueue`` for a coroutine (``IAsyncEnqueue``)."""
        return self.enqueue(item)


class ReferencePriorityQueue(_QueueBase):
    """A priority queue: implements ``IPersistentPriorityQueue`` and every extension protocol."""

    def enqueue(self, item: bytes | str, priority: int) -> bool:
        """Store ``item`` with ``priority`` (lower first); ``False`` when refused."""
        return self._put(item, self._priority(priority, optional=False), None)

    async def enqueue_async(self, item: bytes | str, priority: int) -> bool:
        """``enqueue`` for a coroutine (``IAsyncEnqueue``)."""
        return self.enqueue(item, priority)


class ReferenceDistributedQueue(ReferenceQueue):
    """A FIFO queue that also implements ``IDistributedQueue``."""

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """Call ``callback("enqueued")`` after each job added under this name, by any object."""
        self._subscribe(callback)


class ReferenceDistributedPriorityQueue(ReferencePriorityQueue):
    """A priority queue that also implements ``IDistributedPriorityQueue``."""

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """Call ``callback("enqueued")`` after each job added under this name, by any object."""
        self._subscribe(callback)
