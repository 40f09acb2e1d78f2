"""Bounded retention by count and age: completed jobs and dead letters are kept alike.

Both are counted in a column of ``queues`` (``done``, ``dead``), so keeping them within bounds
costs O(rows dropped), not O(rows kept). Runs inside the caller's write transaction; no I/O of
its own beyond the statements of :mod:`sqliteq._sql`. (Ended job records are kept the same way,
with a keep time of their own each: :mod:`sqliteq._records`.)
"""

from __future__ import annotations

import sqlite3
from typing import NamedTuple

from . import _sql

__all__ = ["DEAD", "DONE", "Retention", "keep_within"]


class Retention(NamedTuple):
    """The four statements of one kind of kept row (see :mod:`sqliteq._sql`)."""

    kept: str  # the kept count of a queue
    prune_by_age: str  # drop those older than :cutoff
    prune_oldest: str  # drop the :excess oldest
    add: str  # add :delta to the kept count


DONE = Retention(_sql.DONE_COUNT, _sql.PRUNE_DONE_BY_AGE, _sql.PRUNE_DONE_OLDEST, _sql.ADD_DONE)
DEAD = Retention(_sql.DEAD_COUNT, _sql.PRUNE_DEAD_BY_AGE, _sql.PRUNE_DEAD_OLDEST, _sql.ADD_DEAD)


def keep_within(
    conn: sqlite3.Connection, rows: Retention, queue: str, added: int, *, cutoff: int, limit: int
) -> None:
    """Count ``added`` new rows of ``queue``, then drop those before ``cutoff`` (ms) and the
    oldest beyond ``limit``, keeping the count right."""
    params = {"queue": queue}
    before = int(conn.execute(rows.kept, params).fetchone()[0])
    kept = before + added
    kept -= conn.execute(rows.prune_by_age, {**params, "cutoff": cutoff}).rowcount
    excess = kept - limit
    if excess > 0:
        kept -= conn.execute(rows.prune_oldest, {**params, "excess": excess}).rowcount
    if kept != before:
        conn.execute(rows.add, {**params, "delta": kept - before})
