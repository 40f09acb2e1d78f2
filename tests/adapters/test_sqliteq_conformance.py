"""The storage conformance suite on sqliteq: one temporary file per test, the clock replaced."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

import sqliteq
from varmq.testing.conformance import ALL_EXTENSIONS, QueueConformance, StorageHarness


class SqliteqHarness:
    """Queues in one file; ``advance`` moves the clock that sqliteq stores deadlines with.

    Each queue object gets its own ``Queues`` (its own connection), as separate processes
    would have; they share the clock. ``options`` (``dead_letter_limit``,
    ``dead_letter_max_age``) go to the queue.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.now = 1_700_000_000_000
        self.opened: list[sqliteq.Queues] = []

    def clock(self) -> int:
        return self.now

    def new_queue(
        self,
        name: str,
        *,
        priority: bool,
        distributed: bool,
        visibility_timeout: float,
        **options: Any,
    ) -> Any:
        queues = sqliteq.new(self.path, clock=self.clock)
        self.opened.append(queues)
        opener = {
            (False, False): queues.new_queue,
            (True, False): queues.new_priority_queue,
            (False, True): queues.new_distributed_queue,
            (True, True): queues.new_distributed_priority_queue,
        }[priority, distributed]
        return opener(name, visibility_timeout=visibility_timeout, **options)

    def advance(self, seconds: float) -> None:
        self.now += round(seconds * 1000)

    def close(self) -> None:
        for queues in self.opened:
            queues.close()


class TestSqliteqConformance(QueueConformance):
    """sqliteq claims every extension: capacity, delays, nacks, dead letters and stats."""

    extensions: ClassVar[tuple[type, ...]] = ALL_EXTENSIONS

    @pytest.fixture
    def harness(self, tmp_path: Path) -> Iterator[StorageHarness]:
        made = SqliteqHarness(tmp_path / "jobs.db")
        try:
            yield made
        finally:
            made.close()
