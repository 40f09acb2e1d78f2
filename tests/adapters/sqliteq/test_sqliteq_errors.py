"""Storage trouble raises: every operation on an open queue, named, bounded in time, undone.

The outage is the one another process causes most often: a connection holding the file's
write lock. Reads (``len``, ``stats``, ``values``, ``dead_letters``) do not wait for a writer in
WAL mode; they raise when the file cannot be read (a damaged file, below).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import sqliteq
from tests.adapters.sqliteq.conftest import corrupt_jobs_pages
from varmq.testing import FakeWallClock

TIMEOUT = 0.3


@pytest.fixture
def store(db_path: Path, clock: FakeWallClock) -> Iterator[sqliteq.Queues]:
    opened = sqliteq.new(db_path, clock=clock, busy_timeout=TIMEOUT)
    yield opened
    opened.close()


@pytest.fixture
def locked(db_path: Path) -> Iterator[sqlite3.Connection]:
    """Call ``locked.execute("BEGIN IMMEDIATE")`` to hold the write lock; released after."""
    blocker = sqlite3.connect(db_path, isolation_level=None)
    yield blocker
    if blocker.in_transaction:
        blocker.execute("ROLLBACK")
    blocker.close()


def _writes(q: Any, ack_id: str) -> dict[str, Callable[[], object]]:
    return {
        "enqueue": lambda: q.enqueue(b"new", 0),
        "enqueue_dedup": lambda: q.enqueue_dedup(b"new", "id-1"),
        "enqueue_delayed": lambda: q.enqueue_delayed(b"new", 5),
        "take": lambda: q.dequeue_batch_with_attempts(3),
        "dequeue": lambda: q.dequeue(),
        "acknowledge": lambda: q.acknowledge(ack_id),
        "acknowledge_many": lambda: q.acknowledge_many([ack_id]),
        "extend_lease": lambda: q.extend_lease(ack_id),
        "nack": lambda: q.nack(ack_id, 0),
        "release": lambda: q.release(ack_id),
        "dead_letter": lambda: q.dead_letter(ack_id, "boom"),
        "requeue_dead": lambda: q.requeue_dead(),
        "purge_dead": lambda: q.purge_dead(),
        "purge": lambda: q.purge(),
        "set_capacity": lambda: q.set_capacity(10),
    }


def test_every_write_raises_an_oserror_naming_the_file_and_changes_nothing(
    store: sqliteq.Queues, locked: sqlite3.Connection, db_path: Path
) -> None:
    q = store.new_priority_queue("work")
    q.enqueue(b"a", 1)
    q.enqueue(b"b", 2)
    _, ack_id = q.dequeue_with_ack_id()
    before = sqlite3.connect(db_path).execute("SELECT * FROM jobs ORDER BY id").fetchall()
    locked.execute("BEGIN IMMEDIATE")
    for op, call in _writes(q, ack_id).items():
        started = time.monotonic()
        with pytest.raises(sqliteq.StorageUnavailableError) as raised:
            call()
        took = time.monotonic() - started
        error = raised.value
        assert isinstance(error, OSError) and isinstance(error, sqliteq.SqliteqError), op
        assert str(db_path) in str(error) and "locked" in str(error), op
        assert isinstance(error.__cause__, sqlite3.OperationalError), op
        assert took < TIMEOUT + 1.0, (op, took)
    locked.execute("ROLLBACK")
    after = sqlite3.connect(db_path).execute("SELECT * FROM jobs ORDER BY id").fetchall()
    assert after == before
    assert q.acknowledge(ack_id) is True  # the lease held through the outage


def test_fenced_and_empty_answers_stay_answers(store: sqliteq.Queues, clock: FakeWallClock) -> None:
    q = store.new_queue("work", visibility_timeout=10)
    assert q.dequeue_batch_with_attempts(5) == []
    assert q.dequeue() is None
    q.enqueue(b"a")
    _, ack_id = q.dequeue_with_ack_id()
    clock.advance(11)
    for call in (q.extend_lease, q.acknowledge, q.release):
        assert call(ack_id) is False
    assert q.nack(ack_id, 0) is False
    assert q.dead_letter(ack_id, "x") is False
    assert q.acknowledge("no-such-lease") is False


def test_a_closed_queue_refuses_quietly_and_still_settles(store: sqliteq.Queues) -> None:
    q = store.new_queue("work")
    q.enqueue(b"a")
    q.enqueue(b"b")
    _, first = q.dequeue_with_ack_id()
    _, second = q.dequeue_with_ack_id()
    q.close()
    assert q.enqueue(b"c") is False
    assert q.dequeue_batch_with_attempts(1) == []
    assert len(q) == 0
    assert q.extend_lease(first) is True
    assert q.acknowledge(first) is True
    assert q.release(second) is True


def test_a_closed_store_answers_nothing_without_raising(store: sqliteq.Queues) -> None:
    q = store.new_queue("work")
    q.enqueue(b"a")
    _, ack_id = q.dequeue_with_ack_id()
    store.close()
    assert q.acknowledge(ack_id) is False
    assert q.extend_lease(ack_id) is False
    assert len(q) == 0


def test_the_busy_timeout_bounds_a_call_and_is_checked(db_path: Path) -> None:
    with pytest.raises(TypeError, match="busy_timeout"):
        sqliteq.new(db_path, busy_timeout="3")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="busy_timeout"):
        sqliteq.new(db_path, busy_timeout=True)
    for bad in (-1, float("nan"), float("inf"), 601):
        with pytest.raises(ValueError, match="busy_timeout"):
            sqliteq.new(db_path, busy_timeout=bad)
    assert not db_path.exists()


def test_the_default_busy_timeout_is_three_seconds_for_a_whole_call(
    db_path: Path, locked: sqlite3.Connection
) -> None:
    with sqliteq.new(db_path) as store:
        q = store.new_queue("work")
        locked.execute("BEGIN IMMEDIATE")
        started = time.monotonic()
        with pytest.raises(sqliteq.StorageUnavailableError, match="3 s"):
            q.enqueue(b"x")
        took = time.monotonic() - started
        locked.execute("ROLLBACK")
    assert 2.9 < took < 4.0


def test_a_take_on_a_file_damaged_while_open_raises_saying_corrupt(db_path: Path) -> None:
    with sqliteq.new(db_path) as setup:
        q = setup.new_queue("work")
        for i in range(2000):
            q.enqueue(b"job %d" % i)
    store = sqliteq.new(db_path)
    q = store.new_queue("work")
    corrupt_jobs_pages(db_path)
    # Another process commits: this connection drops its page cache and reads the file again.
    other = sqlite3.connect(db_path, isolation_level=None)
    other.execute("UPDATE queues SET enqueued = enqueued")
    other.close()
    with pytest.raises(sqliteq.DamagedDatabaseError, match="corrupt") as raised:
        q.dequeue_batch_with_attempts(10)
    assert isinstance(raised.value, sqliteq.StorageUnavailableError)
    assert str(db_path) in str(raised.value)
    with pytest.raises(sqliteq.DamagedDatabaseError):
        len(q)
    store.close()
