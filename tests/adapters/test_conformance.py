"""The storage conformance suite, run on the reference storage with a fake clock.

Each storage runs ``varmq.testing.conformance.QueueConformance`` through a harness of three
methods (see that module's docstring):

- ``new_queue(name, *, priority, distributed, visibility_timeout, **options)``: open a queue of
  that kind; the same name twice gives two objects sharing one stored queue; ``options`` are the
  dead-letter retention options (``dead_letter_limit``, ``dead_letter_max_age``);
- ``advance(seconds)``: let lease and delay time pass (here: move the ``FakeClock``);
- ``close()``: close everything the harness opened.

Adapters run the same suite from their own test modules (``test_sqliteq_conformance.py``, ...).
"""

from __future__ import annotations

from typing import Any

from varmq.testing.conformance import ALL_EXTENSIONS, QueueConformance, StorageHarness
from varmq.testing.storage import FakeClock, MemoryStorage


class MemoryHarness:
    """Queues on one ``MemoryStorage`` whose time moves only by ``advance``."""

    def __init__(self) -> None:
        self.clock = FakeClock()
        self.storage = MemoryStorage(clock=self.clock)

    def new_queue(
        self,
        name: str,
        *,
        priority: bool,
        distributed: bool,
        visibility_timeout: float,
        **options: Any,
    ) -> Any:
        opener = {
            (False, False): self.storage.new_queue,
            (True, False): self.storage.new_priority_queue,
            (False, True): self.storage.new_distributed_queue,
            (True, True): self.storage.new_distributed_priority_queue,
        }[priority, distributed]
        return opener(name, visibility_timeout=visibility_timeout, **options)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def close(self) -> None:
        self.storage.close()


class TestReferenceStorage(QueueConformance):
    """The reference storage implements every extension protocol: capacity, retries, stats."""

    extensions = ALL_EXTENSIONS

    def make_harness(self) -> StorageHarness:
        return MemoryHarness()
