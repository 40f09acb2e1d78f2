"""Test support for adapter authors: a reference storage and the conformance suite.

- ``varmq.testing.storage``: :class:`MemoryStorage`, every storage protocol in memory, with a
  :class:`FakeClock` and :class:`Faults` switches; re-exported here.
- ``varmq.testing.conformance``: ``QueueConformance``, the pytest suite every storage passes.
  Import it from that module; it needs pytest, which this package does not.
"""

from varmq.testing.storage import (
    FakeClock,
    Faults,
    MemoryDistributedPriorityQueue,
    MemoryDistributedQueue,
    MemoryPriorityQueue,
    MemoryQueue,
    MemoryStorage,
)

__all__ = [
    "FakeClock",
    "Faults",
    "MemoryDistributedPriorityQueue",
    "MemoryDistributedQueue",
    "MemoryPriorityQueue",
    "MemoryQueue",
    "MemoryStorage",
]
