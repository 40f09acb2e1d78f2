"""WAL checkpoints run on a thread of the ``Queues``, not inside an add's ``COMMIT``."""

from __future__ import annotations

import threading
from pathlib import Path

import sqliteq
from sqliteq import _checkpoint

PAGE = 4096


def _checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sqliteq:checkpoint"]


def _wal_restarts(path: Path) -> int:
    """The WAL header's checkpoint sequence number: one more each time the WAL restarts."""
    with path.open("rb") as wal:
        return int.from_bytes(wal.read(16)[12:16], "big")


def test_the_wal_restarts_long_before_the_backstop_and_every_job_stays(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    wal = tmp_path / "jobs.db-wal"
    added = 0
    with sqliteq.new(path) as queues:
        q = queues.new_queue("q")
        assert q.enqueue(b"first")
        added += 1
        first = _wal_restarts(wal)
        # Each add writes about three pages: without the thread, the WAL would restart only
        # once the backstop's automatic checkpoint runs (after BACKSTOP_PAGES pages).
        while _wal_restarts(wal) == first and added < 2 * _checkpoint.BACKSTOP_PAGES:
            assert q.enqueue(b"%d" % added)
            added += 1
        assert _wal_restarts(wal) != first
        assert wal.stat().st_size < _checkpoint.BACKSTOP_PAGES * PAGE
    with sqliteq.new(path) as queues:
        assert len(queues.new_queue("q")) == added


def test_close_stops_the_checkpoint_thread(tmp_path: Path) -> None:
    before = set(_checkpoint_threads())
    queues = sqliteq.new(tmp_path / "jobs.db")
    q = queues.new_queue("q")
    for _ in range(2 * _checkpoint.EVERY_COMMITS):
        q.enqueue(b"x")
    assert set(_checkpoint_threads()) - before  # started by the adds
    queues.close()
    assert set(_checkpoint_threads()) == before


def test_a_file_opened_read_only_starts_no_checkpoint_thread(tmp_path: Path) -> None:
    with sqliteq.new(tmp_path / "jobs.db") as queues:
        queues.new_queue("q").enqueue(b"x")
    before = set(_checkpoint_threads())
    with sqliteq.new(tmp_path / "jobs.db", read_only=True, create=False) as queues:
        assert len(queues.open_queue("q")) == 1
        assert set(_checkpoint_threads()) == before


def test_a_file_opened_with_synchronous_off_is_checkpointed_too(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    with sqliteq.new(path, synchronous="OFF") as queues:
        q = queues.new_queue("q")
        for _ in range(2 * _checkpoint.EVERY_COMMITS):
            assert q.enqueue(b"x")
    with sqliteq.new(path) as queues:
        assert len(queues.new_queue("q")) == 2 * _checkpoint.EVERY_COMMITS
