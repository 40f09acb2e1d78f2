"""Group commit: adds made at the same time from many threads share one write transaction.

Most of an add's cost is its transaction (``BEGIN IMMEDIATE``, ``COMMIT``, the WAL frames of
the pages it dirtied), not its ``INSERT``. :class:`GroupCommit` lets concurrent adds through
one :class:`~sqliteq._database.Database` pay it once between them, leader/follower style:

- an add that finds no transaction of adds running commits at once, alone: a single thread
  waits for nobody (the *leader*);
- an add that arrives while one runs waits (a *follower*); when the leader has committed it
  hands the lead to the oldest waiting add, which takes every add that gathered meanwhile and
  stores them in one transaction.

Each add still gets its own answer, exactly the one it would get alone in that order: ``True``
stored (or its job id already held), ``False`` refused (the queue full, the file closed). If
the transaction fails, every add of that batch gets its error and nothing of the batch is in
the file (the transaction rolled back).
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from dataclasses import dataclass, field

from . import _sql
from ._clock import Clock
from ._database import Database
from .errors import ClosedError

__all__ = ["Add", "GroupCommit"]


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


@dataclass(slots=True)
class _Call:
    """One caller's adds, waiting for their answers."""

    adds: list[Add]
    answers: list[bool] = field(default_factory=list)
    error: BaseException | None = None
    gate: threading.Lock | None = None  # held while a follower waits; released to wake it
    lead: bool = False  # woken to lead, not because its answers are in


class GroupCommit:
    """Stores concurrent adds through ``db``, one transaction per group (see the module)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        # Protects _pending and _leading: the calls waiting for the next transaction, and
        # whether some thread is storing a batch now (then newcomers wait for it).
        self._lock = threading.Lock()
        self._pending: list[_Call] = []
        self._leading = False
        _instances.add(self)

    def store(self, adds: list[Add]) -> list[bool]:
        """Store ``adds`` (in order, in one transaction, maybe with other callers' adds).

        One answer per add. Raises the transaction's error (nothing of it was stored).
        """
        call = _Call(adds)
        with self._lock:
            self._pending.append(call)
            if self._leading:
                call.gate = gate = threading.Lock()
                gate.acquire()
            else:
                self._leading = True
        if call.gate is not None:
            try:
                call.gate.acquire()  # released by the leader that stored us, or to make us lead
            except BaseException:  # interrupted (Ctrl-C): nobody may wait for us to lead
                self._abandon(call)
                raise
        if call.gate is None or call.lead:
            self._lead(call)
        if call.error is not None:
            raise call.error
        return call.answers

    def _lead(self, own: _Call) -> None:
        """Store every pending call in one transaction, then hand the lead on."""
        try:
            self._commit(own)
        finally:
            with self._lock:
                self._hand_on()

    def _hand_on(self) -> None:
        """Wake the oldest waiting call to lead the next transaction, if one waits (locked)."""
        if self._pending:
            successor = self._pending[0]
            successor.lead = True
            assert successor.gate is not None  # it came while a leader led: a follower
            successor.gate.release()
        else:
            self._leading = False

    def _abandon(self, call: _Call) -> None:
        """A follower that stops waiting: its adds leave the queue if no transaction took
        them yet, and if it was just made leader, the lead goes on to the next one."""
        with self._lock:
            if call in self._pending:
                self._pending.remove(call)
            if call.lead:
                self._hand_on()

    def _commit(self, own: _Call) -> None:
        """Run one transaction of the pending calls and give each its answers or error.

        The calls are taken once the write lock is held: the adds that arrived while
        ``BEGIN IMMEDIATE`` waited go in too.
        """
        batch: list[_Call] = []
        lease_clock = self._db.lease_clock

        def body(conn: sqlite3.Connection, now: int) -> list[bool]:
            with self._lock:
                batch[:], self._pending = self._pending, []
            return _store(conn, now, [add for call in batch for add in call.adds], lease_clock)

        answers: list[bool] = []
        error: BaseException | None = None
        refused = False
        try:
            answers = self._db.transaction(body, "enqueue")
        except ClosedError:
            refused = True  # the file was closed: refused, as a single add is
        except BaseException as exc:  # every caller of the batch hears it, the leader too
            error = exc
        if not batch:  # the transaction failed before it took them: the waiting hear it too
            with self._lock:
                batch[:], self._pending = self._pending, []
        start = 0
        for call in batch:
            if error is None:
                stop = start + len(call.adds)
                call.answers = [False] * len(call.adds) if refused else answers[start:stop]
                start = stop
            call.error = error
            if call is not own:
                assert call.gate is not None
                call.gate.release()

    def _forked(self) -> None:
        """In a fork child: no thread of the parent leads or waits here."""
        self._lock = threading.Lock()
        self._pending = []
        self._leading = False


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
        if add.capacity:
            if times is None:
                times = {"now": now, "lease_now": lease_clock()}
            if _is_full(conn, add, times):
                # A job id that is already stored is there: not a refusal (as without a limit).
                answers.append(add.job_id is not None and _is_stored(conn, add, now))
                i += 1
                continue
        added = conn.execute(add.statement, add.params).rowcount == 1
        if added and add.wakes:  # a delayed job wakes nobody: it cannot be taken yet
            woken[add.queue] = woken.get(add.queue, 0) + 1
        answers.append(True)
        i += 1
    for queue, count in woken.items():
        conn.execute(_sql.BUMP_ENQUEUED_BY, {"queue": queue, "count": count})
    return answers


def _is_full(conn: sqlite3.Connection, add: Add, times: dict[str, int]) -> bool:
    params = {"queue": add.queue, **times, "capacity": add.capacity}
    return int(conn.execute(_sql.COUNT_WAITING, params).fetchone()[0]) >= add.capacity


def _is_stored(conn: sqlite3.Connection, add: Add, now: int) -> bool:
    params = {"queue": add.queue, "job_id": add.job_id, "now": now}
    return bool(conn.execute(_sql.JOB_ID_STORED, params).fetchone()[0])


# Every GroupCommit of the process, reset in a fork child (see _forked).
_instances: weakref.WeakSet[GroupCommit] = weakref.WeakSet()


def _after_fork() -> None:
    for group in list(_instances):
        group._forked()


os.register_at_fork(after_in_child=_after_fork)
