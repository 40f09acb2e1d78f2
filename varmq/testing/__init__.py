"""Test support for adapter authors: a reference storage and the conformance suite.

- ``varmq.testing.storage``: :class:`MemoryStorage`, every storage protocol in memory (delays,
  nacks, dead letters and stats included), with a :class:`FakeClock` and :class:`Faults`
  switches; re-exported here.
- ``varmq.testing.conformance``: ``QueueConformance``, the pytest suite every storage passes
  (its retry tests are in ``varmq.testing.conformance_retries``). Import it from that module;
  it needs pytest, which this package does not.
"""

from varmq.testing.storage import (
    DEAD_LETTER_LIMIT,
    DEAD_LETTER_MAX_AGE,
    FakeClock,
    Faults,
    MemoryDistributedPriorityQueue,
    MemoryDistributedQueue,
    MemoryPriorityQueue,
    MemoryQueue,
    MemoryStorage,
)

__all__ = [
    "DEAD_LETTER_LIMIT",
    "DEAD_LETTER_MAX_AGE",
    "FakeClock",
    "Faults",
    "MemoryDistributedPriorityQueue",
    "MemoryDistributedQueue",
    "MemoryPriorityQueue",
    "MemoryQueue",
    "MemoryStorage",
]
