"""Test support for adapter authors: a reference storage, a harness and the conformance suite.

- ``varmq.testing.storage``: :class:`MemoryStorage`, every storage protocol in memory (delays,
  nacks, dead letters and stats included), whose queues are :class:`ReferenceQueue` and its
  three siblings (not to be confused with ``varmq.MemoryQueue``, the worker's in-memory queue of
  job objects), with a :class:`FakeClock` and :class:`Faults` switches; re-exported here.
- ``varmq.testing.harness``: :class:`QueuesHarness`, which opens queues on any store with the
  four ``new_*`` openers, and :class:`FakeWallClock`, the ``clock=`` of ``sqliteq``/``redisq``;
  re-exported here.
- ``varmq.testing.conformance``: ``QueueConformance``, the pytest suite every storage passes.
  Import it from that module; it needs pytest, which this package does not.
"""

from varmq.testing.faults import Faults
from varmq.testing.harness import FakeWallClock, QueueKind, QueuesHarness, StorageHarness
from varmq.testing.storage import (
    DEAD_LETTER_LIMIT,
    DEAD_LETTER_MAX_AGE,
    FakeClock,
    MemoryStorage,
    ReferenceDistributedPriorityQueue,
    ReferenceDistributedQueue,
    ReferencePriorityQueue,
    ReferenceQueue,
)

__all__ = [
    "DEAD_LETTER_LIMIT",
    "DEAD_LETTER_MAX_AGE",
    "FakeClock",
    "FakeWallClock",
    "Faults",
    "MemoryStorage",
    "QueueKind",
    "QueuesHarness",
    "ReferenceDistributedPriorityQueue",
    "ReferenceDistributedQueue",
    "ReferencePriorityQueue",
    "ReferenceQueue",
    "StorageHarness",
]
