"""What every part of the conformance suite shares: the base class, kinds, timings, helpers.

Private to ``varmq.testing``: ``conformance`` re-exports the public names, and each part of the
suite (``conformance``, ``conformance_retries``, ``conformance_checks``, ``conformance_worker``,
``conformance_records``, ``conformance_progress``, ``conformance_leases``, ``conformance_topics``,
``conformance_workers``)
subclasses :class:`SuiteBase` and imports the helpers from here. Needs pytest.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import pytest

from varmq.contract.protocols import (
    IAsyncEnqueue,
    IBatchAcknowledgeable,
    ICapacitySetter,
    ICountedDelivery,
    IDeadLetterable,
    IDedupQueue,
    IDelayedEnqueue,
    IHasWorkerRegistry,
    IJobProgress,
    IJobRecords,
    ILeaseExtendable,
    ILeaseReleasable,
    ILiveTopics,
    IMultiAcknowledgeable,
    INackable,
    IQueueStats,
    IRateLimited,
    IRecordSubscribable,
    IScheduleMarks,
    IStorageTopics,
)
from varmq.testing.harness import QueueKind, StorageHarness

LEASE = 0.5
"""Visibility timeout of the queues in lease tests, in seconds."""
LONG_LEASE = 60.0
"""Visibility timeout where a test does not want leases to expire, however slow the storage."""
WAIT = 5.0
"""Longest wait for something another thread or process does."""
DELAY = 0.5
"""Delay of delayed enqueues and nacks in the retry tests, in seconds."""

DEFAULT_EXTENSIONS: tuple[type, ...] = (
    IBatchAcknowledgeable,
    ICountedDelivery,
    IMultiAcknowledgeable,
    IDedupQueue,
    ILeaseExtendable,
    ILeaseReleasable,
)
"""The optional protocols a storage claims unless it says otherwise: those the worker relies on
for batching, retries, dedup and long jobs, and that ``sqliteq`` and ``redisq`` implement."""
RETRY_EXTENSIONS: tuple[type, ...] = (IDelayedEnqueue, INackable, IDeadLetterable, IQueueStats)
"""The protocols of delayed jobs, retries, dead letters and stats (tests in
``conformance_retries``). Not in ``DEFAULT_EXTENSIONS``: a storage claims them once it has them."""
RECORD_EXTENSIONS: tuple[type, ...] = (IJobRecords, IRecordSubscribable, IScheduleMarks)
"""The protocols of job records (tests in ``conformance_records``): what a job became, kept for
``keep_results`` seconds, waited for and cancelled by id, and the schedule marks that keep an
occurrence from running twice. Not in ``DEFAULT_EXTENSIONS``."""
PROGRESS_EXTENSIONS: tuple[type, ...] = (IJobProgress,)
"""The progress of running jobs, kept in their records (tests in ``conformance_progress``);
needs ``RECORD_EXTENSIONS``. Not in ``DEFAULT_EXTENSIONS``."""
RATE_EXTENSIONS: tuple[type, ...] = (IRateLimited,)
"""Rate limits enforced in the take (tests in ``conformance_rates``). Not in
``DEFAULT_EXTENSIONS``."""
TOPIC_EXTENSIONS: tuple[type, ...] = (IStorageTopics, ILiveTopics)
"""The protocols of a store's topics (``store.topics()``; tests in ``conformance_topics``).
The store claims them, not its queues. ``ILiveTopics`` needs ``IStorageTopics``."""
WORKER_EXTENSIONS: tuple[type, ...] = (IHasWorkerRegistry,)
"""The records a store keeps of the workers consuming its queues (``store.workers()``; tests in
``conformance_workers``). Not in ``DEFAULT_EXTENSIONS``."""
ALL_EXTENSIONS: tuple[type, ...] = (
    *DEFAULT_EXTENSIONS,
    ICapacitySetter,
    *RETRY_EXTENSIONS,
    *RECORD_EXTENSIONS,
    *PROGRESS_EXTENSIONS,
    *RATE_EXTENSIONS,
    *TOPIC_EXTENSIONS,
    *WORKER_EXTENSIONS,
)
"""Every optional protocol the suite knows how to test."""

ASYNC_EXTENSIONS: tuple[type, ...] = (IAsyncEnqueue,)
"""Adds for coroutines (``enqueue_async`` and its dedup and delayed forms; tests in
``conformance_async``). Not in ``ALL_EXTENSIONS``: a storage claims them once it has them (the
reference storage and ``sqliteq`` do)."""

FIFO_KINDS = (QueueKind(False, False), QueueKind(False, True))
PRIORITY_KINDS = (QueueKind(True, False), QueueKind(True, True))
DISTRIBUTED_KINDS = (QueueKind(False, True), QueueKind(True, True))
ALL_KINDS = (*FIFO_KINDS, *PRIORITY_KINDS)


class SuiteBase:
    """The harness fixture, the queue opener and ``require``: what every part of the suite uses.

    Subclass :class:`~varmq.testing.conformance.QueueConformance`, which combines every part;
    the parts alone are not meant to be run.
    """

    extensions: ClassVar[tuple[type, ...]] = DEFAULT_EXTENSIONS
    """The optional protocols this storage implements; the tests of the others are skipped.

    Narrow it when your storage lacks one; widen it with ``ICapacitySetter``,
    ``RETRY_EXTENSIONS``, ``RECORD_EXTENSIONS`` and ``PROGRESS_EXTENSIONS`` when it implements
    them (``ALL_EXTENSIONS`` is every one).
    """

    def make_harness(self) -> StorageHarness:
        """Return a fresh harness for one test."""
        raise NotImplementedError(f"{type(self).__name__} must implement make_harness()")

    @pytest.fixture(params=ALL_KINDS, ids=str)
    def kind(self, request: pytest.FixtureRequest) -> QueueKind:
        """The kind of queue a test runs on: each of the four, unless the test narrows them
        (:func:`kinds`)."""
        kind: QueueKind = request.param
        return kind

    @pytest.fixture
    def harness(self) -> Iterator[StorageHarness]:
        """One harness per test, closed afterwards."""
        made = self.make_harness()
        try:
            yield made
        finally:
            made.close()

    def open(
        self,
        harness: StorageHarness,
        kind: QueueKind,
        name: str | None = None,
        lease: float = LONG_LEASE,
        *,
        needs: Sequence[type] = (),
        **options: Any,
    ) -> Any:
        """Open a queue of ``kind``; a fresh unique name unless ``name`` is given. Skip the
        test unless the storage claims each protocol of ``needs`` (see :meth:`require`).

        ``options`` are further queue options (``dead_letter_limit``, ...).
        """
        self.require(*needs)
        return harness.new_queue(
            fresh_name() if name is None else name,
            priority=kind.priority,
            distributed=kind.distributed,
            visibility_timeout=lease,
            **options,
        )

    def store(self, harness: StorageHarness) -> Any:
        """The harness's store, for the store-level tests; skip when the harness has none."""
        queues = getattr(harness, "queues", None)
        if queues is None:
            pytest.skip("the harness has no queues(); QueuesHarness has")
        return queues()

    def require(self, *protocols: type) -> None:
        """Skip the calling test unless the storage claims every one of ``protocols``."""
        for protocol in protocols:
            if protocol not in self.extensions:
                pytest.skip(f"storage does not claim {protocol.__name__}")


def kinds(of: tuple[QueueKind, ...]) -> pytest.MarkDecorator:
    """Run the decorated test once per kind in ``of`` (without it: each of the four)."""
    return pytest.mark.parametrize("kind", of, ids=str)


def bind(worker: Any, q: Any, kind: QueueKind) -> Any:
    """Bind ``q`` to ``worker`` with the ``with_*`` method of its kind; the handle."""
    if kind.distributed:
        if kind.priority:
            return worker.with_distributed_priority_queue(q)
        return worker.with_distributed_queue(q)
    if kind.priority:
        return worker.with_persistent_priority_queue(q)
    return worker.with_persistent_queue(q)


def fresh_name() -> str:
    """A queue name no other test, run or process uses."""
    return f"conformance-{uuid.uuid4().hex}"


def fresh_word() -> str:
    """A topic word no other test, run or process uses (bindings outlive a test in storage)."""
    return f"w{uuid.uuid4().hex}"


def put(q: Any, kind: QueueKind, item: Any, priority: int = 0) -> bool:
    """Enqueue through the shape of ``enqueue`` that ``kind`` has."""
    return bool(q.enqueue(item, priority) if kind.priority else q.enqueue(item))


async def put_async(q: Any, kind: QueueKind, item: Any, priority: int = 0) -> bool:
    """``put`` through ``enqueue_async``."""
    return bool(await (q.enqueue_async(item, priority) if kind.priority else q.enqueue_async(item)))


def take(q: Any) -> bytes | None:
    """Take one job with a lease and return its payload only."""
    taken = q.dequeue_with_ack_id()
    return None if taken is None else taken[0]


def take_one(q: Any) -> tuple[bytes, str]:
    """Take one job that must be there; its payload and ack id."""
    taken = q.dequeue_with_ack_id()
    assert taken is not None, "expected a job to take"
    return taken[0], taken[1]


def drain(q: Any) -> list[bytes]:
    """Take (and acknowledge) everything ready, in take order."""
    items = []
    while (taken := q.dequeue_with_ack_id()) is not None:
        items.append(taken[0])
        assert q.acknowledge(taken[1])
    return items


def kill(q: Any, kind: QueueKind, item: bytes, error: str = "boom") -> str:
    """Store ``item``, take it and dead-letter it (it must be the only job waiting); its key."""
    assert put(q, kind, item)
    taken, ack_id = take_one(q)
    assert taken == item
    assert q.dead_letter(ack_id, error) is True
    return str(q.dead_letters(1_000_000)[-1]["key"])


def priority_arg(kind: QueueKind, priority: int = 0) -> int | None:
    """The ``priority`` argument of the optional-priority calls: ``None`` on FIFO queues."""
    return priority if kind.priority else None
