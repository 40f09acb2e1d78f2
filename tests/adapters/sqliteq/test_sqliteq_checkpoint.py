"""WAL checkpoints run on a thread of the ``Queues``, not inside an add's ``COMMIT``."""

from __future__ import annotations

import threading
from pathlib import Path

import sqliteq
from sqliteq import _checkpoint

PAGE = 4096


def _checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "sqliteq:checkpoint"]


def test_many_single_adds_keep_the_wal_short_and_every_job_stored(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    adds = 8 * _checkpoint.EVERY_COMMITS
    with sqliteq.new(path) as queues:
        q = queues.new_queue("q")
        for i in range(adds):
            assert q.enqueue(b"%d" % i)
        # Each add writes about three pages to the WAL: without checkpoints until the
        # backstop, the WAL would hold all of them.
        without_checkpoints = adds * 3 * PAGE
        assert (tmp_path / "jobs.db-wal").stat().st_size < without_checkpoints / 2
    with sqliteq.new(path) as queues:
        assert len(queues.new_queue("q")) == adds


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
