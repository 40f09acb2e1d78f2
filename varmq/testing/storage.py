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
so no thread is needed. ``FakeClock`` lets a test move time by hand; the default clock is
``time.monotonic``.

Each queue object has a ``faults`` attribute (:class:`Faults`) whose switches make it fail the
way a broken storage would, so tests can watch the worker cope.
"""

from __future__ import annotations

import heapq
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

__all__ = [
    "FakeClock",
    "Faults",
    "MemoryDistributedPriorityQueue",
    "MemoryDistributedQueue",
    "MemoryPriorityQueue",
    "MemoryQueue",
    "MemoryStorage",
]

_log = logging.getLogger("varmq.testing")

Clock = Callable[[], float]
"""A monotonic clock: seconds as a float, never going back."""


class FakeClock:
    """A monotonic clock that moves only when told to: call it for the time, ``advance`` to move."""

    def __init__(self, start: float = 0.0) -> None:
        self._lock = threading.Lock()  # guards _now; it only ever grows
        self._now = start

    def __call__(self) -> float:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward; leases whose deadline is reached expire."""
        if seconds < 0:
            raise ValueError(f"FakeClock.advance: seconds must be >= 0, got {seconds}")
        with self._lock:
            self._now += seconds


@dataclass
class Faults:
    """Failure switches for one queue object; all off by default, each can be flipped any time.

    - ``refuse_enqueue``: ``enqueue`` and ``enqueue_dedup`` return ``False``, storing nothing;
    - ``take_error``: every take (``dequeue``, ``dequeue_with_ack_id``, batch takes) raises it,
      e.g. ``ConnectionError("injected")``; ``None`` to stop;
    - ``refuse_ack``: ``acknowledge`` and ``acknowledge_many`` return ``False``; the job stays
      leased, so it comes back when its lease expires;
    - ``refuse_extend``: ``extend_lease`` returns ``False`` and leaves the deadline as it was.
    """

    refuse_enqueue: bool = False
    take_error: BaseException | None = None
    refuse_ack: bool = False
    refuse_extend: bool = False

    def clear(self) -> None:
        """Turn every switch off."""
        self.refuse_enqueue = self.refuse_ack = self.refuse_extend = False
        self.take_error = None


@dataclass
class _Job:
    item: bytes
    priority: int
    seq: int  # storage-wide enqueue order: the FIFO tie-break among equal priorities
    job_id: str | None  # the dedup id given to enqueue_dedup, if any
    deliveries: int = 0


@dataclass
class _Lease:
    job: _Job
    deadline: float


@dataclass
class _NamedQueue:
    """The jobs stored under one name. Guarded by the owning storage's lock."""

    name: str
    priority: bool
    ready: list[tuple[int, int, _Job]] = field(default_factory=list)  # heap of (priority, seq, job)
    leased: dict[str, _Lease] = field(default_factory=dict)  # ack id -> lease
    job_ids: set[str] = field(default_factory=set)
    capacity: int = 0  # 0: unlimited
    subscribers: list[tuple[_QueueBase, Callable[[str], None]]] = field(default_factory=list)


class MemoryStorage:
    """Named queues in memory; the stand-in for one Redis server or one SQLite file."""

    def __init__(self, clock: Clock | None = None) -> None:
        self._clock: Clock = clock if clock is not None else time.monotonic
        self._lock = threading.Lock()
        # _lock guards every _NamedQueue, _seq and _opened. Invariant while it is free: each
        # stored job is in exactly one place, the ready heap or the leased map of its named queue,
        # and a named queue's job_ids are exactly the dedup ids of its stored jobs.
        self._named: dict[str, _NamedQueue] = {}
        self._seq = itertools.count()
        self._opened: list[_QueueBase] = []

    def new_queue(self, name: str, *, visibility_timeout: float = 300.0) -> MemoryQueue:
        """Open the FIFO queue ``name``; jobs stay leased ``visibility_timeout`` seconds."""
        return MemoryQueue(self, self._named_queue(name, priority=False), visibility_timeout)

    def new_priority_queue(
        self, name: str, *, visibility_timeout: float = 300.0
    ) -> MemoryPriorityQueue:
        """Open the priority queue ``name`` (lower numbers first, FIFO among equals)."""
        return MemoryPriorityQueue(self, self._named_queue(name, priority=True), visibility_timeout)

    def new_distributed_queue(
        self, name: str, *, visibility_timeout: float = 300.0
    ) -> MemoryDistributedQueue:
        """Open the FIFO queue ``name`` with ``subscribe``."""
        named = self._named_queue(name, priority=False)
        return MemoryDistributedQueue(self, named, visibility_timeout)

    def new_distributed_priority_queue(
        self, name: str, *, visibility_timeout: float = 300.0
    ) -> MemoryDistributedPriorityQueue:
        """Open the priority queue ``name`` with ``subscribe``."""
        named = self._named_queue(name, priority=True)
        return MemoryDistributedPriorityQueue(self, named, visibility_timeout)

    def close(self) -> None:
        """Close every queue object opened on this storage. The jobs stay."""
        with self._lock:
            opened, self._opened = self._opened, []
        for q in opened:
            q.close()

    def _named_queue(self, name: str, *, priority: bool) -> _NamedQueue:
        with self._lock:
            named = self._named.setdefault(name, _NamedQueue(name, priority))
        if named.priority != priority:
            kind = "priority" if named.priority else "FIFO"
            raise ValueError(f"memory storage: queue {name!r} is a {kind} queue; open it as one")
        return named


class _QueueBase:
    """Everything a queue object does except ``enqueue`` (whose shape depends on the kind)."""

    def __init__(self, storage: MemoryStorage, named: _NamedQueue, lease_seconds: float) -> None:
        if not lease_seconds > 0:
            raise ValueError(f"queue {named.name!r}: visibility_timeout must be > 0")
        self.faults = Faults()
        self._storage = storage
        self._named = named
        self._lease_seconds = float(lease_seconds)
        self._lock = storage._lock  # one lock per storage; see MemoryStorage.__init__
        self._closed = False  # written under _lock
        with self._lock:
            storage._opened.append(self)

    @property
    def name(self) -> str:
        """The queue's name in its storage."""
        return self._named.name

    @property
    def lease_seconds(self) -> float:
        """How long a lease lasts after a take or an extension (the visibility timeout)."""
        return self._lease_seconds

    # -- adding ------------------------------------------------------------------------------

    def enqueue_dedup(self, item: bytes | str, job_id: str, priority: int | None = None) -> bool:
        """Store ``item`` unless a job with ``job_id`` is stored (waiting or in flight).

        ``True`` in both cases, ``False`` when refused. FIFO queues ignore ``priority``.
        """
        return self._put(item, priority or 0, job_id)

    def set_capacity(self, capacity: int) -> None:
        """Refuse enqueues into this name once ``capacity`` jobs wait (0: unlimited)."""
        if capacity < 0:
            raise ValueError(f"queue {self.name!r}: capacity must be >= 0, got {capacity}")
        with self._lock:
            self._named.capacity = capacity

    def _put(self, item: bytes | str, priority: int, job_id: str | None) -> bool:
        data = _as_bytes(item, self.name)
        if not self._named.priority:
            priority = 0  # a FIFO queue is a priority queue where everyone is equal
        elif isinstance(priority, bool) or not isinstance(priority, int):
            raise TypeError(f"queue {self.name!r}: priority must be an int, got {priority!r}")
        if self.faults.refuse_enqueue:
            return False
        with self._lock:
            named = self._named
            if self._closed:
                return False
            self._recover_expired()
            if job_id is not None and job_id in named.job_ids:
                return True  # already stored: the job is there
            if named.capacity and len(named.ready) >= named.capacity:
                return False
            job = _Job(data, priority, next(self._storage._seq), job_id)
            heapq.heappush(named.ready, (priority, job.seq, job))
            if job_id is not None:
                named.job_ids.add(job_id)
            subscribers = [callback for _, callback in named.subscribers]
        for callback in subscribers:  # outside the lock: a callback may call back into us
            try:
                callback("enqueued")
            except Exception:
                _log.warning("queue %r: a subscriber raised; ignored", self.name, exc_info=True)
        return True

    def _subscribe(self, callback: Callable[[str], None]) -> None:
        with self._lock:
            if not self._closed:
                self._named.subscribers.append((self, callback))

    # -- taking ------------------------------------------------------------------------------

    def dequeue(self) -> bytes | None:
        """Take the next job for good, without a lease; ``None`` when there is none."""
        self._raise_take_fault()
        with self._lock:
            if self._closed:
                return None
            self._recover_expired()
            if not self._named.ready:
                return None
            _, _, job = heapq.heappop(self._named.ready)
            self._named.job_ids.discard(job.job_id or "")
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
        self._raise_take_fault()
        with self._lock:
            if self._closed:
                return []
            self._recover_expired()
            deadline = self._storage._clock() + self._lease_seconds
            taken: list[tuple[bytes, str, int]] = []
            while self._named.ready and len(taken) < n:
                _, _, job = heapq.heappop(self._named.ready)
                job.deliveries += 1
                ack_id = uuid.uuid4().hex  # fresh per delivery: a stale one never matches
                self._named.leased[ack_id] = _Lease(job, deadline)
                taken.append((job.item, ack_id, job.deliveries))
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
        """Acknowledge each id in order, in one step; one result per id."""
        if self.faults.refuse_ack:
            return [False] * len(ack_ids)
        with self._lock:
            self._recover_expired()
            results = []
            for ack_id in ack_ids:
                lease = self._named.leased.pop(ack_id, None)
                if lease is not None:
                    self._named.job_ids.discard(lease.job.job_id or "")
                results.append(lease is not None)
            return results

    def extend_lease(self, ack_id: str) -> bool:
        """Restart the lease of ``ack_id``; ``False`` when it expired, is unknown, or refused."""
        if self.faults.refuse_extend:
            return False
        with self._lock:
            self._recover_expired()
            lease = self._named.leased.get(ack_id)
            if lease is None:
                return False
            lease.deadline = self._storage._clock() + self._lease_seconds
            return True

    def _recover_expired(self) -> None:
        """Put every job whose lease deadline is reached back in line. Caller holds _lock."""
        now = self._storage._clock()
        named = self._named
        for ack_id in [a for a, lease in named.leased.items() if lease.deadline <= now]:
            job = named.leased.pop(ack_id).job
            heapq.heappush(named.ready, (job.priority, job.seq, job))

    # -- looking and tidying -----------------------------------------------------------------

    def __len__(self) -> int:
        """Jobs waiting to be taken (not in flight); 0 once this object is closed."""
        with self._lock:
            if self._closed:
                return 0
            self._recover_expired()
            return len(self._named.ready)

    def values(self) -> list[bytes]:
        """The waiting jobs in the order they would be taken; ``[]`` once closed."""
        with self._lock:
            if self._closed:
                return []
            self._recover_expired()
            return [job.item for _, _, job in sorted(self._named.ready)]

    def purge(self) -> None:
        """Remove every waiting job; jobs in flight stay leased. Does nothing once closed."""
        with self._lock:
            if self._closed:
                return
            self._recover_expired()
            for _, _, job in self._named.ready:
                self._named.job_ids.discard(job.job_id or "")
            self._named.ready.clear()

    def close(self) -> None:
        """Refuse enqueues and hand nothing out from now on; acks and extensions still work."""
        with self._lock:
            self._closed = True
            named = self._named
            named.subscribers = [(q, cb) for q, cb in named.subscribers if q is not self]

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class MemoryQueue(_QueueBase):
    """A FIFO queue: implements ``IPersistentQueue`` and every extension protocol."""

    def enqueue(self, item: bytes | str) -> bool:
        """Store ``item`` last in line; ``False`` when refused (closed, full, fault)."""
        return self._put(item, 0, None)


class MemoryPriorityQueue(_QueueBase):
    """A priority queue: implements ``IPersistentPriorityQueue`` and every extension protocol."""

    def enqueue(self, item: bytes | str, priority: int) -> bool:
        """Store ``item`` with ``priority`` (lower first); ``False`` when refused."""
        return self._put(item, priority, None)


class MemoryDistributedQueue(MemoryQueue):
    """A FIFO queue that also implements ``IDistributedQueue``."""

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """Call ``callback("enqueued")`` after each job added under this name, by any object."""
        self._subscribe(callback)


class MemoryDistributedPriorityQueue(MemoryPriorityQueue):
    """A priority queue that also implements ``IDistributedPriorityQueue``."""

    def subscribe(self, callback: Callable[[str], None]) -> None:
        """Call ``callback("enqueued")`` after each job added under this name, by any object."""
        self._subscribe(callback)


def _as_bytes(item: object, name: str) -> bytes:
    if isinstance(item, bytes):
        return item
    if isinstance(item, str):
        return item.encode()
    raise TypeError(f"queue {name!r}: items must be bytes or str, got {type(item).__name__}")
