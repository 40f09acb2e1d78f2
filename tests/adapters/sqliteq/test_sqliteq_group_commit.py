"""Group commit: adds made at the same time share one transaction, each with its own answer.

A batch is made for sure by holding the file's write lock from another connection (as another
process would) while the adds arrive: the first add waits in ``BEGIN IMMEDIATE``, the others
queue behind it, and when the lock is given back the first one stores them all in one
transaction. A trigger that refuses one payload shows that they really shared it: the
innocent adds of the batch fail with it.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import sqliteq
import varmq
from sqliteq.errors import StorageUnavailableError
from tests.adapters.sqliteq.conftest import rows

WAIT = 10.0
"""Longest wait for another thread."""


@pytest.fixture
def store(db_path: Path) -> Iterator[sqliteq.Queues]:
    opened = sqliteq.new(db_path, busy_timeout=30)
    yield opened
    opened.close()


@contextmanager
def write_lock_held(db_path: Path) -> Iterator[sqlite3.Connection]:
    """Another connection holds the write lock until the block ends (then commits)."""
    blocker = sqlite3.connect(db_path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        yield blocker
        blocker.execute("COMMIT")
    finally:
        blocker.close()


def wait_queued(store: sqliteq.Queues, calls: int) -> None:
    """Wait until ``calls`` calls wait for the next transaction of adds."""
    group = store._writer.group._group
    deadline = time.monotonic() + WAIT
    while len(group._waiting) < calls:
        assert time.monotonic() < deadline, f"only {len(group._waiting)} of {calls} adds queued"
        time.sleep(0.001)


def in_threads(calls: list[Callable[[], Any]]) -> tuple[list[threading.Thread], list[Any]]:
    """Start one thread per call; the list its answer (or exception) lands in, by index."""
    answers: list[Any] = [None] * len(calls)

    def run(index: int) -> None:
        try:
            answers[index] = calls[index]()
        except Exception as exc:
            answers[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    return threads, answers


def one_batch(db_path: Path, store: sqliteq.Queues, calls: list[Callable[[], Any]]) -> list[Any]:
    """Make ``calls`` concurrently so that they are stored in one transaction; their answers."""
    with write_lock_held(db_path):
        threads, answers = in_threads(calls)
        wait_queued(store, len(calls))
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive(), "an add hangs"
    return answers


def stored(db_path: Path, queue: str) -> list[bytes]:
    return [bytes(r[0]) for r in rows(db_path, "SELECT data FROM jobs WHERE queue = ?", queue)]


def test_adds_queued_behind_a_transaction_are_stored_together_each_told(
    db_path: Path, store: sqliteq.Queues
) -> None:
    q = store.new_queue("jobs")
    calls = [lambda n=n: q.enqueue(f"job-{n}".encode()) for n in range(8)]
    assert one_batch(db_path, store, calls) == [True] * 8
    assert sorted(stored(db_path, "jobs")) == sorted(f"job-{n}".encode() for n in range(8))
    assert rows(db_path, "SELECT enqueued FROM queues WHERE name = 'jobs'") == [(8,)]


def test_eight_threads_adding_at_once_are_each_told_what_the_file_holds(
    db_path: Path, store: sqliteq.Queues
) -> None:
    q = store.new_queue("jobs")
    limited = store.new_queue("limited")
    limited.set_capacity(100)

    def produce(thread: int) -> list[bool]:
        answers = []
        for n in range(100):
            answers.append(q.enqueue(f"{thread}-{n}".encode()))
            answers.append(q.enqueue_dedup(b"shared", f"id-{n % 25}"))  # each id from 8 threads
        return answers + [limited.enqueue(b"x") for _ in range(25)]

    threads, answers = in_threads([lambda t=t: produce(t) for t in range(8)])
    for thread in threads:
        thread.join(WAIT * 3)
        assert not thread.is_alive(), "an add hangs"
    for mine in answers:
        assert not isinstance(mine, Exception), mine
        assert mine[:200] == [True] * 200
    assert len(q) == 8 * 100 + 25
    limited_answers = [answer for mine in answers for answer in mine[200:]]
    assert limited_answers.count(True) == 100 == len(limited)


def test_a_batch_over_two_queues_tells_the_subscribers_of_both(
    db_path: Path, store: sqliteq.Queues
) -> None:
    first, second = store.new_distributed_queue("first"), store.new_distributed_queue("second")
    heard = {"first": threading.Event(), "second": threading.Event()}
    for name, q in (("first", first), ("second", second)):
        q.subscribe(lambda action, name=name: heard[name].set())
    calls = [lambda: first.enqueue(b"a"), lambda: second.enqueue(b"b")]
    calls += [lambda: first.enqueue_delayed(b"later", 60.0), lambda: first.enqueue(b"c")]
    assert one_batch(db_path, store, calls) == [True] * 4
    assert heard["first"].wait(WAIT) and heard["second"].wait(WAIT)
    counters = rows(db_path, "SELECT name, enqueued FROM queues ORDER BY name")
    assert counters == [("first", 2), ("second", 1)]  # the delayed job wakes nobody yet


def test_a_job_id_brought_twice_in_one_batch_is_stored_once_and_both_hear_true(
    db_path: Path, store: sqliteq.Queues
) -> None:
    q = store.new_queue("jobs")
    calls = [
        lambda: q.enqueue_dedup(b"first", "same"),
        lambda: q.enqueue_dedup(b"second", "same"),
        lambda: q.enqueue(b"plain"),
    ]
    assert one_batch(db_path, store, calls) == [True, True, True]
    assert len(q) == 2
    assert rows(db_path, "SELECT count(*) FROM jobs WHERE job_id = 'same'") == [(1,)]


def test_a_capacity_reached_inside_a_batch_refuses_the_adds_beyond_it(
    db_path: Path, store: sqliteq.Queues
) -> None:
    q = store.new_queue("jobs")
    q.set_capacity(3)
    assert q.enqueue(b"before")
    answers = one_batch(db_path, store, [lambda: q.enqueue(b"x") for _ in range(5)])
    assert sorted(answers) == [False, False, False, True, True]
    assert len(q) == 3


def test_a_failing_transaction_fails_every_add_of_its_batch_and_stores_none(
    db_path: Path, store: sqliteq.Queues
) -> None:
    q = store.new_queue("jobs")
    with write_lock_held(db_path) as blocker:
        # Another writer's trigger that refuses one payload: the batch's transaction fails.
        blocker.execute(
            "CREATE TRIGGER poison BEFORE INSERT ON jobs WHEN NEW.data = X'706f69736f6e' "
            "BEGIN SELECT RAISE(ABORT, 'poisoned payload'); END"
        )
        calls = [lambda: q.enqueue(b"innocent"), lambda: q.enqueue(b"poison")]
        calls += [lambda: q.enqueue_dedup(b"also innocent", "id-1")]
        threads, answers = in_threads(calls)
        wait_queued(store, len(calls))
    for thread in threads:
        thread.join(WAIT)
    for answer in answers:
        assert isinstance(answer, StorageUnavailableError)
        assert "poisoned payload" in str(answer)
    assert stored(db_path, "jobs") == []
    assert q.enqueue(b"innocent") is True  # the next transaction is a fresh one


def test_strict_adds_of_a_failed_or_full_batch_raise_enqueue_error(
    db_path: Path, store: sqliteq.Queues
) -> None:
    stored_queue = store.new_distributed_queue("jobs")
    stored_queue.set_capacity(1)
    handle = varmq.new_distributed_queue(stored_queue)
    calls = [lambda n=n: handle.add(n, strict=True) for n in range(3)]
    answers = one_batch(db_path, store, calls)
    assert sum(answer is True for answer in answers) == 1
    refused = [answer for answer in answers if answer is not True]
    assert len(refused) == 2
    assert all(isinstance(answer, varmq.EnqueueError) for answer in refused)
    assert len(stored_queue) == 1


def test_add_async_runs_on_the_writer_thread_and_a_burst_shares_transactions(
    db_path: Path, store: sqliteq.Queues
) -> None:
    handle = varmq.new_distributed_queue(store.new_distributed_queue("jobs"))

    async def burst() -> list[bool]:
        with write_lock_held(db_path):
            adds = [asyncio.ensure_future(handle.add_async(n)) for n in range(50)]
            await asyncio.sleep(0)  # every add handed to the writer thread
            assert "sqliteq:writer" in {t.name for t in threading.enumerate()}
            # The first batch waits for the write lock; the others gather behind it.
        return list(await asyncio.gather(*adds))

    assert asyncio.run(burst()) == [True] * 50
    assert len(stored(db_path, "jobs")) == 50
    store.close()
    assert "sqliteq:writer" not in {t.name for t in threading.enumerate()}


def test_async_adds_share_a_failed_transaction_and_all_raise(
    db_path: Path, store: sqliteq.Queues
) -> None:
    q = store.new_queue("jobs")

    async def burst() -> list[Any]:
        with write_lock_held(db_path) as blocker:
            blocker.execute(
                "CREATE TRIGGER poison BEFORE INSERT ON jobs WHEN NEW.data = X'706f69736f6e' "
                "BEGIN SELECT RAISE(ABORT, 'poisoned payload'); END"
            )
            first = asyncio.ensure_future(q.enqueue_async(b"first"))
            await asyncio.sleep(0)
            wait_queued(store, 1)  # the writer thread waits for the lock with "first"
            rest = [q.enqueue_async(b"innocent"), q.enqueue_async(b"poison")]
            later = asyncio.gather(*rest, return_exceptions=True)
        return [await first, *await later]

    first, innocent, poison = asyncio.run(burst())
    assert first is True  # alone in the transaction the writer thread had begun
    assert isinstance(innocent, StorageUnavailableError)
    assert isinstance(poison, StorageUnavailableError)
    assert stored(db_path, "jobs") == [b"first"]


def test_closing_while_adds_wait_answers_every_one_and_hangs_none(
    db_path: Path, store: sqliteq.Queues
) -> None:
    q = store.new_queue("jobs")
    loop_answers: list[Any] = []

    def async_adds() -> None:
        async def burst() -> list[Any]:
            calls = (q.enqueue_async(f"async-{n}".encode()) for n in range(20))
            return list(await asyncio.gather(*calls, return_exceptions=True))

        loop_answers.extend(asyncio.run(burst()))

    with write_lock_held(db_path):
        threads, answers = in_threads([lambda n=n: q.enqueue(f"t-{n}".encode()) for n in range(6)])
        threads.append(threading.Thread(target=async_adds))
        threads[-1].start()
        wait_queued(store, 6)
        closer = threading.Thread(target=store.close)
        closer.start()
    closer.join(WAIT)
    assert not closer.is_alive(), "close() hangs"
    for thread in threads:
        thread.join(WAIT)
        assert not thread.is_alive(), "an add hangs after close()"
    every = answers + loop_answers
    assert len(every) == 26
    assert all(answer is True or answer is False for answer in every), every
    assert sum(answer is True for answer in every) == len(stored(db_path, "jobs"))
    assert q.enqueue(b"after") is False  # closed: refused, as always


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX only")
def test_adds_work_in_a_fork_child_made_while_the_writer_thread_runs(
    db_path: Path, store: sqliteq.Queues
) -> None:
    q = store.new_queue("jobs")
    assert asyncio.run(q.enqueue_async(b"parent-before"))  # the writer thread is up

    def child() -> bool:
        # The inherited objects lead no thread of the parent: a fresh writer starts here.
        own = sqliteq.new(db_path, busy_timeout=30)
        try:
            mine = own.new_queue("jobs")
            return bool(asyncio.run(mine.enqueue_async(b"child")) and mine.enqueue(b"child-2"))
        finally:
            own.close()

    pid = os.fork()
    if pid == 0:
        code = 3
        try:
            code = 0 if child() else 4
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert asyncio.run(q.enqueue_async(b"parent-after"))
    assert sorted(stored(db_path, "jobs")) == [
        b"child",
        b"child-2",
        b"parent-after",
        b"parent-before",
    ]
