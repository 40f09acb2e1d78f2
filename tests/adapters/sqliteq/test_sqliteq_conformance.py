"""The storage conformance suite on sqliteq: one temporary file per test, the clock replaced.

The outage is another connection holding the file's write lock (``BEGIN IMMEDIATE``), as
another process would, while the stores wait at most ``OUTAGE_BUSY_TIMEOUT`` for it.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import sqliteq
from varmq.contract.protocols import ILiveTopics
from varmq.testing import FakeWallClock, QueuesHarness
from varmq.testing.conformance import ALL_EXTENSIONS, ASYNC_EXTENSIONS, QueueConformance

OUTAGE_BUSY_TIMEOUT = 0.2
"""Seconds the stores of the suite wait for the write lock before a call raises."""


class TestSqliteqConformance(QueueConformance):
    """sqliteq claims every extension: capacity, delays, nacks, dead letters, stats, job
    records and adds for coroutines (a writer thread, group commit).

    Each queue object gets a ``Queues`` of its own (its own connections), as separate processes
    would have; they share the file and the clock that sqliteq stores deadlines with.
    """

    # ILiveTopics (live subscribers across processes) is not planned for SQLite: topics() is
    # IStorageTopics only.
    extensions = (*(e for e in ALL_EXTENSIONS if e is not ILiveTopics), *ASYNC_EXTENSIONS)

    @pytest.fixture(autouse=True)
    def _file(self, tmp_path: Path) -> None:
        self.path = tmp_path / "jobs.db"

    def make_harness(self) -> QueuesHarness:
        clock = FakeWallClock()
        return QueuesHarness(
            lambda: sqliteq.new(self.path, clock=clock, busy_timeout=OUTAGE_BUSY_TIMEOUT),
            clock.advance,
            outage=self._write_lock_held,
        )

    @contextlib.contextmanager
    def _write_lock_held(self) -> Iterator[None]:
        """Another connection holds the write lock for the time of the block."""
        blocker = sqlite3.connect(self.path, isolation_level=None)
        try:
            blocker.execute("BEGIN IMMEDIATE")
            yield
            blocker.execute("ROLLBACK")
        finally:
            blocker.close()
