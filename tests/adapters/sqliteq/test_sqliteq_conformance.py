"""The storage conformance suite on sqliteq: one temporary file per test, the clock replaced."""

from __future__ import annotations

from pathlib import Path

import pytest

import sqliteq
from varmq.protocols import ILeaseReleasable, ILiveTopics
from varmq.testing import FakeWallClock, QueuesHarness
from varmq.testing.conformance import ALL_EXTENSIONS, RECORD_EXTENSIONS, QueueConformance


class TestSqliteqConformance(QueueConformance):
    """sqliteq claims every extension: capacity, delays, nacks, dead letters and stats.

    Each queue object gets a ``Queues`` of its own (its own connections), as separate processes
    would have; they share the file and the clock that sqliteq stores deadlines with.
    """

    # release() is not implemented by this adapter yet. TEMPORARY: neither are job records
    # (RECORD_EXTENSIONS: keep_results, job_record, cancel, the settles with an outcome,
    # subscribe_records); their conformance tests are left out until sqliteq implements them.
    # ILiveTopics (live subscribers across processes) is not planned for SQLite: topics() is
    # IStorageTopics only.
    extensions = tuple(
        e
        for e in ALL_EXTENSIONS
        if e not in (ILeaseReleasable, ILiveTopics) and e not in RECORD_EXTENSIONS
    )

    @pytest.fixture(autouse=True)
    def _file(self, tmp_path: Path) -> None:
        self.path = tmp_path / "jobs.db"

    def make_harness(self) -> QueuesHarness:
        clock = FakeWallClock()
        return QueuesHarness(lambda: sqliteq.new(self.path, clock=clock), clock.advance)
