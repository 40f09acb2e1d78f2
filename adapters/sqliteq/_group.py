"""The adds of one file, group-committed: adds made at the same time from many threads share
one write transaction.

Most of an add's cost is its transaction (``BEGIN IMMEDIATE``, ``COMMIT``, the WAL frames of
the pages it dirtied), not its ``INSERT``. :class:`Adds` lets concurrent adds through one
:class:`~sqliteq._database.Database` pay it once between them, through varmq's group commit
(:class:`varmq.contract.batching.GroupCommit`): an add that finds no transaction of adds
running commits at once, alone; adds that arrive while one runs go together in the next. The
transaction gathers the waiting adds once it holds the write lock, so the adds that arrived
while ``BEGIN IMMEDIATE`` waited go in too.

Each add still gets its own answer, exactly the one it would get alone in that order: ``True``
stored (or its job id already held), ``False`` refused (the queue full, the file closed). If
the transaction fails, every add of that batch gets its error and nothing of the batch is in
the file (the transaction rolled back).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from varmq.contract.batching import GroupCommit

from . import _sql
from ._clock import Clock
from ._database import Database
from .errors import ClosedError

__all__ = ["Add", "Adds"]


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
