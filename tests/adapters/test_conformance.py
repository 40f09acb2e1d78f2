"""The storage conformance suite, run on the reference storage with a fake clock.

Every storage runs ``varmq.testing.conformance.QueueConformance`` through a harness; a store with
the four ``new_*`` openers needs only ``QueuesHarness(open_queues, advance)``. Adapters run the
same suite from their own test modules (``test_sqliteq_conformance.py``, ...).
"""

from __future__ import annotations

from varmq.testing import FakeClock, MemoryStorage, QueuesHarness
from varmq.testing.conformance import ALL_EXTENSIONS, ASYNC_EXTENSIONS, QueueConformance


class TestReferenceStorage(QueueConformance):
    """The reference storage implements every extension protocol: capacity, retries, stats,
    the topics of the store, and adds for coroutines.

    Every queue of a test is opened on one ``MemoryStorage`` whose time moves only by
    ``advance``.
    """

    extensions = (*ALL_EXTENSIONS, *ASYNC_EXTENSIONS)

    def make_harness(self) -> QueuesHarness:
        clock = FakeClock()
        storage = MemoryStorage(clock=clock)
        return QueuesHarness(
            lambda: storage, clock.advance, storage.outage, storage.disconnect_subscribers
        )
