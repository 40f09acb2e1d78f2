"""The adds of one ``Queues``: group-committed for threads, and on a writer thread for coroutines.

Most of an add's cost is its transaction (``BEGIN IMMEDIATE``, ``COMMIT``, the WAL frames of
the pages it dirtied), not its ``INSERT``. :class:`Adds` lets concurrent adds through one
:class:`~sqliteq._database.Database` pay it once between them, through varmq's group commit
(:class:`varmq.contract.batching.GroupCommit`): an add that finds no transaction of adds
running commits at once, alone; adds that arrive while one runs go together in the next. The
transaction gathers the waiting adds once it holds the write lock, so the adds that arrived
while ``BEGIN IMMEDIATE`` waited go in too. Each add still gets its own answer, exactly the one
it would get alone in that order: ``True`` stored (or its job id already held), ``False``
refused (the queue full, the file closed). If the transaction fails, every add of that batch
gets its error and nothing of the batch is in the file (the transaction rolled back).

A coroutine must not block its event loop on SQLite, and a burst of ``enqueue_async`` calls
(one per request a web service serves) should cost one transaction, not one each. So the adds
coroutines make go to one small thread of the ``Queues`` (``sqliteq:writer``, started by the
first one, :class:`Writer`): it takes every add waiting for it, stores them through the same
:class:`Adds` as the threads' adds (so they may share a transaction with those too) and
completes the awaiting futures on their own loops with ``loop.call_soon_threadsafe``, one call
per loop and batch.

``close()`` stores what was already handed to the thread, then stops it: no caller is left
waiting. An add made after ``close()`` is refused (``False``) like a blocking add on a closed
file. A cancelled ``enqueue_async`` does not take its job back once the thread has it: the job
may be stored all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from varmq.contract.batching import GroupCommit

from . import _schema, _sql
from ._clock import Clock
from ._database import Database
from .errors import ClosedError

__all__ = ["Add", "Adds", "Writer"]


@dataclass(slots=True)
class Add:
    """One job to store, as its queue prepared it (arguments checked, bytes encoded).

    ``params`` binds ``statement`` except ``:now``, which the transaction sets. ``capacity``
    (0: none) is the limit of the queue object that made the add; ``wakes``: the job is ready
    at once, so the queue's enqueue counter is bumped for subscribers.
    """

    queue: str
    statement: str
    params: dict[str, object]
    capacity: int = 0
    job_id: str | None = None
    wakes: bool = True
    # (schedule, occurrence in ms) of a schedule's occurrence: stored only if the queue's mark
    # of that schedule is earlier, and the mark moved in the same transaction.
    mark: tuple[str, int] | None = None


class Adds:
    """Stores concurrent adds through ``db``, one transaction per group (see the module)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._group: GroupCommit[Add, bool] = GroupCommit(self._write)

    def store(self, adds: Sequence[Add]) -> Sequence[bool]:
        """Store ``adds`` (in order, in one transaction, maybe with other callers' adds).

        One answer per add. Raises the transaction's error (nothing of it was stored).
        """
        return self._group.submit(adds)

    def _write(self, gather: Callable[[], list[Add]]) -> list[bool]:
        """One transaction of the adds waiting once it holds the write lock."""
        lease_clock = self._db.lease_clock

        def body(conn: sqlite3.Connection, now: int) -> list[bool]:
            return _store(conn, now, gather(), lease_clock)

        try:
            return self._db.transaction(body, "enqueue")
        except ClosedError:
            return [False] * len(gather())  # the file was closed: refused, as a single add is


def _store(conn: sqlite3.Connection, now: int, adds: list[Add], lease_clock: Clock) -> list[bool]:
    """Run ``adds`` in order inside the caller's transaction; one answer per add."""
    if len(adds) == 1 and adds[0].statement is _sql.ENQUEUE and not adds[0].capacity:
        # The common single add, without the general loop's bookkeeping.
        add = adds[0]
        add.params["now"] = now
        conn.execute(_sql.ENQUEUE, add.params)
        conn.execute(_sql.BUMP_ENQUEUED_BY, {"queue": add.queue, "count": 1})
        return [True]
    answers: list[bool] = []
    woken: dict[str, int] = {}
    times: dict[str, int] | None = None  # the times a capacity check binds, read once
    n, i = len(adds), 0
    while i < n:
        add = adds[i]
        if add.statement is _sql.ENQUEUE and not add.capacity:
            # A run of plain adds: every row is inserted (no dedup, no limit), one statement.
            j = i + 1
            while j < n and adds[j].statement is _sql.ENQUEUE and not adds[j].capacity:
                j += 1
            run = adds[i:j]
            for add in run:
                add.params["now"] = now
                woken[add.queue] = woken.get(add.queue, 0) + 1
            if len(run) == 1:
                conn.execute(_sql.ENQUEUE, run[0].params)
            else:
                conn.executemany(_sql.ENQUEUE, [add.params for add in run])
            answers += [True] * len(run)
            i = j
            continue
        add.params["now"] = now
        if add.mark is not None and _marked(conn, add):
            answers.append(True)  # that occurrence, or a later one, was added already
            i += 1
            continue
        if add.capacity:
            if times is None:
                times = {"now": now, "lease_now": lease_clock()}
            if _is_full(conn, add, times):
                # A job id that is already stored is there: not a refusal (as without a limit).
                answers.append(add.job_id is not None and _is_stored(conn, add, now))
                i += 1
                continue
        added = conn.execute(add.statement, add.params).rowcount == 1
        if add.mark is not None:
            schedule, at = add.mark
            mark = {"queue": add.queue, "schedule": schedule, "occurrence_ms": at}
            conn.execute(_sql.SET_SCHEDULE_MARK, mark)
        if added and add.wakes:  # a delayed job wakes nobody: it cannot be taken yet
            woken[add.queue] = woken.get(add.queue, 0) + 1
        answers.append(True)
        i += 1
    for queue, count in woken.items():
        conn.execute(_sql.BUMP_ENQUEUED_BY, {"queue": queue, "count": count})
    return answers


def _marked(conn: sqlite3.Connection, add: Add) -> bool:
    """Whether the queue's mark of the add's schedule is at or after its occurrence."""
    assert add.mark is not None
    conn.execute(_schema.CREATE_SCHEDULE_MARKS)
    schedule, at = add.mark
    row = conn.execute(_sql.SCHEDULE_MARK, {"queue": add.queue, "schedule": schedule}).fetchone()
    return row is not None and int(row[0]) >= at


def _is_full(conn: sqlite3.Connection, add: Add, times: dict[str, int]) -> bool:
    params = {"queue": add.queue, **times, "capacity": add.capacity}
    return int(conn.execute(_sql.COUNT_WAITING, params).fetchone()[0]) >= add.capacity


def _is_stored(conn: sqlite3.Connection, add: Add, now: int) -> bool:
    params = {"queue": add.queue, "job_id": add.job_id, "now": now}
    return bool(conn.execute(_sql.JOB_ID_STORED, params).fetchone()[0])


# One waiting add: the add, its future, and the loop that awaits it.
_Waiting = tuple[Add, "asyncio.Future[bool]", asyncio.AbstractEventLoop]


class Writer:
    """Stores the adds of one ``Queues``: :meth:`store` for threads, :meth:`store_async` for
    coroutines."""

    def __init__(self, db: Database) -> None:
        self.group = Adds(db)
        self._path = db.path
        # Protects _waiting, _thread and _closed; notified when the first add waits.
        self._cond = threading.Condition(threading.Lock())
        self._waiting: list[_Waiting] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        _instances.add(self)

    def store(self, adds: Sequence[Add]) -> Sequence[bool]:
        """Store ``adds`` from this thread, maybe in one transaction with other callers' adds."""
        return self.group.store(adds)

    async def store_async(self, add: Add) -> bool:
        """Store ``add`` on the writer thread; ``False`` once closed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        with self._cond:
            if self._closed:
                return False
            self._waiting.append((add, future, loop))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sqliteq:writer", daemon=True
                )
                self._thread.start()
            elif len(self._waiting) == 1:  # the thread may be asleep: nothing was waiting
                self._cond.notify()
        return await future

    def close(self) -> None:
        """Store the adds already handed over, then stop the thread. Idempotent."""
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                waiting, self._waiting = self._waiting, []
            if not waiting:
                return  # closed, and nothing left to store
            self._store(waiting)

    def _store(self, waiting: list[_Waiting]) -> None:
        """Store one batch and hand each future its answer (or the batch's error)."""
        answers: Sequence[bool] = ()
        error: BaseException | None = None
        try:
            answers = self.group.store([add for add, _, _ in waiting])
        except BaseException as exc:  # every add of the batch hears it, none is left waiting
            error = exc
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[bool], bool]]] = {}
        for index, (_, future, loop) in enumerate(waiting):
            answer = answers[index] if error is None else False
            by_loop.setdefault(loop, []).append((future, answer))
        for loop, settled in by_loop.items():
            # RuntimeError: the loop was closed, nobody awaits these any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, settled, error)

    def _forked(self) -> None:
        """In a fork child: the parent's thread is not here, nor are its loops' adds."""
        self._cond = threading.Condition(threading.Lock())
        self._waiting = []
        self._thread = None


def _settle(settled: list[tuple[asyncio.Future[bool], bool]], error: BaseException | None) -> None:
    """On the awaiting loop: give each future its answer, unless its caller gave up."""
    for future, answer in settled:
        if future.done():  # cancelled
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(answer)


# Every Writer of the process, reset in a fork child (see _forked).
_instances: weakref.WeakSet[Writer] = weakref.WeakSet()


def _after_fork() -> None:
    for writer in list(_instances):
        writer._forked()


os.register_at_fork(after_in_child=_after_fork)
