"""A queue's rate limit (``rate_limit=(count, seconds)``), kept in the file: the starts of the
current window, in the table ``rate_starts`` (one row per take that leased jobs: its time on
the lease clock and how many), shared by every process of the host.

A take asks :meth:`RateWindow.allowance` how many jobs it may lease, then records what it
leased with :meth:`RateWindow.started`, in the take's own write transaction: the write lock of
the file makes the two one step for every process. Times are on the lease clock (host-wide,
not settable): a wall clock stepped back or forward neither reopens nor closes a window. A row
later than the clock's now was written in another boot and is dropped with the expired ones.

The table is made by the first take of a limited queue (no schema version, like
``queue_settings``): an older sqliteq process sharing the file does not know it, and takes
from a limited queue without the limit; docs/sqliteq.md says so. No state of its own beyond
whether the table was made; a :class:`RateWindow` belongs to one queue object.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from . import _schema, _sql

__all__ = ["RateWindow"]


class RateWindow:
    """The window of one limited queue: ``count`` starts in any ``seconds``."""

    def __init__(self, queue: str, count: int, seconds: float) -> None:
        self._queue = queue
        self._count = count
        self._window_ms = max(1, round(seconds * 1000))
        self._made = False
        #: Seconds until the window lets another job start, as the last take left it.
        self.throttled_for = 0.0

    def _params(self, lease_now: int) -> dict[str, Any]:
        return {"queue": self._queue, "lease_now": lease_now, "window_ms": self._window_ms}

    def allowance(self, conn: sqlite3.Connection, lease_now: int, wanted: int) -> int:
        """How many of ``wanted`` jobs a take at ``lease_now`` may lease (in its transaction)."""
        if not self._made:
            conn.execute(_schema.CREATE_RATE_STARTS)
            conn.execute(_schema.CREATE_RATE_STARTS_BY_QUEUE)
            self._made = True
        params = self._params(lease_now)
        conn.execute(_sql.PRUNE_RATE_STARTS, params)
        used, oldest = conn.execute(_sql.RATE_WINDOW, params).fetchone()
        left = self._count - int(used or 0)
        if left <= 0:
            self.throttled_for = (int(oldest) + self._window_ms - lease_now) / 1000.0
            return 0
        return min(wanted, left)

    def started(self, conn: sqlite3.Connection, lease_now: int, taken: int) -> None:
        """Count ``taken`` starts at ``lease_now``; note when the window opens if it is full."""
        params = self._params(lease_now)
        if taken:
            conn.execute(_sql.RECORD_RATE_STARTS, {**params, "n": taken})
        used, oldest = conn.execute(_sql.RATE_WINDOW, params).fetchone()
        if int(used or 0) >= self._count:
            self.throttled_for = (int(oldest) + self._window_ms - lease_now) / 1000.0
        else:
            self.throttled_for = 0.0

    def used(self, conn: sqlite3.Connection, lease_now: int) -> int:
        """Starts in the window at ``lease_now`` (0 before the table exists)."""
        try:
            row = conn.execute(_sql.RATE_WINDOW_LIVE, self._params(lease_now)).fetchone()
        except sqlite3.OperationalError:  # no such table: no take of a limited queue yet
            return 0
        return int(row[0] or 0)
