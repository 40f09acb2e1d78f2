"""The shared connections of one ``Queues``: locks, write transactions, retries and warnings.

Every queue of a ``Queues`` runs its statements through one :class:`Database`: writes on one
connection, plain reads (``len``, ``values``) on a second one. In WAL mode a reader never waits
for a writer, and with its own lock a slow ``len()`` over a long backlog does not hold up takes
from other threads (measured: 4 taking threads beside 2 threads calling ``len()`` on 20,000
waiting jobs took 2-3 times more jobs per second than with one shared connection). Writes run
inside ``BEGIN IMMEDIATE`` ... ``COMMIT``: the write lock is taken before anything is read, so
SQLite's busy handler (``busy_timeout``) queues writers instead of failing them with
"database is locked" as a deferred transaction would. If the busy timeout still runs out
(another process held the lock that long), ``BEGIN`` is retried a few times with a short
back-off before the operation gives up and returns its "nothing" value.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from . import _sql
from .errors import ClosedError

__all__ = ["Clock", "Database"]

Clock = Callable[[], int]
T = TypeVar("T")

logger = logging.getLogger("sqliteq")

# Back-off before each further BEGIN IMMEDIATE once busy_timeout ran out (seconds).
_BEGIN_BACKOFF = (0.01, 0.05, 0.2)


class Database:
    """One read-write connection to a sqliteq file, safe to use from any thread."""

    def __init__(
        self,
        path: str,
        conn: sqlite3.Connection,
        read_conn: sqlite3.Connection,
        clock: Clock,
    ) -> None:
        self.path = path
        self.clock = clock
        # Protects _conn and _closed: one transaction at a time on the connection (sqlite3
        # connections must not interleave transactions), and no statement after close().
        self._lock = threading.Lock()
        self._conn = conn
        # Protects _read_conn: one statement at a time on it, none after close().
        self._read_lock = threading.Lock()
        self._read_conn = read_conn
        self._closed = False
        # Conditions already logged; cleared by the next success, so that a condition that
        # comes back is reported again, but a retry loop is reported once.
        self._warned: set[str] = set()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def transaction(self, body: Callable[[sqlite3.Connection, int], T]) -> T:
        """Run ``body(conn, now)`` in one write transaction; raise on any failure.

        ``now`` is read from the clock after the write lock is held, so a deadline is never
        computed from a time that passed while waiting for the lock.
        """
        with self._lock:
            if self._closed:
                raise ClosedError(f"sqliteq: {self.path} is closed")
            self._begin_immediate()
            try:
                result = body(self._conn, self.clock())
                self._conn.execute(_sql.COMMIT)
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute(_sql.ROLLBACK)
                raise
            self._warned.clear()
            return result

    def write(self, op: str, body: Callable[[sqlite3.Connection, int], T], default: T) -> T:
        """Like :meth:`transaction`, but a storage failure gives ``default`` and a warning."""
        try:
            return self.transaction(body)
        except ClosedError:
            return default
        except sqlite3.Error as exc:
            self.warn_once(op, f"sqliteq: {op} on {self.path} failed: {exc}")
            return default

    def read(self, op: str, body: Callable[[sqlite3.Connection, int], T], default: T) -> T:
        """Run ``body(conn, now)`` on the read connection (each statement sees one snapshot)."""
        with self._read_lock:
            if self._closed:
                return default
            try:
                result = body(self._read_conn, self.clock())
            except sqlite3.Error as exc:
                self.warn_once(op, f"sqliteq: {op} on {self.path} failed: {exc}")
                return default
            return result

    def query(self, body: Callable[[sqlite3.Connection, int], T]) -> T:
        """Like :meth:`read`, but raise on any failure (for operator calls, not for workers)."""
        with self._read_lock:
            if self._closed:
                raise ClosedError(f"sqliteq: {self.path} is closed")
            return body(self._read_conn, self.clock())

    def warn_once(self, condition: str, message: str) -> None:
        """Log ``message`` as a warning unless ``condition`` was logged since the last success."""
        if condition not in self._warned:
            self._warned.add(condition)
            logger.warning(message)

    def close(self) -> None:
        """Close the connection; later operations return their "nothing" value."""
        with self._lock, self._read_lock:
            if self._closed:
                return
            self._closed = True
            self._conn.close()
            self._read_conn.close()

    def _begin_immediate(self) -> None:
        for delay in (*_BEGIN_BACKOFF, None):
            try:
                self._conn.execute(_sql.BEGIN_IMMEDIATE)
                return
            except sqlite3.OperationalError as exc:
                if delay is None or not _is_busy(exc):
                    raise
                self.warn_once(
                    "busy",
                    f"sqliteq: {self.path} stayed locked by another connection longer than "
                    f"busy_timeout; retrying",
                )
                time.sleep(delay)


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED and their extended codes
    return "locked" in str(exc) or "busy" in str(exc)
