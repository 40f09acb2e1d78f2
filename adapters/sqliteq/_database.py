"""The shared connections of one ``Queues``: locks, write transactions, and storage errors.

Every queue of a ``Queues`` runs its statements through one :class:`Database`: writes on one
connection, plain reads (``len``, ``values``) on a second one. In WAL mode a reader never waits
for a writer, and with its own lock a slow ``len()`` over a long backlog does not hold up takes
from other threads (measured: 4 taking threads beside 2 threads calling ``len()`` on 20,000
waiting jobs took 2-3 times more jobs per second than with one shared connection). Writes run
inside ``BEGIN IMMEDIATE`` ... ``COMMIT``: the write lock is taken before anything is read, so
SQLite's busy handler (``busy_timeout``) queues writers instead of failing them with
"database is locked" as a deferred transaction would.

A call that cannot get an answer raises :class:`~sqliteq.errors.StorageUnavailableError`
(:class:`~sqliteq.errors.DamagedDatabaseError` for a corrupt file) naming the file and the
operation, with the ``sqlite3`` error chained, after rolling its transaction back: nothing is
half done. Waiting for the write lock is bounded by one deadline, ``busy_timeout`` seconds
from the start of the call, however often SQLite answers "busy" at once. Each condition is
logged once until the next success, so a retry loop logs one warning.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from . import _sql
from ._checkpoint import BACKSTOP_PAGES, Checkpointer
from ._clock import Clock
from ._doorbell import Ringer
from ._open import connect, is_busy, read_only_query
from .errors import (
    ClosedError,
    DamagedDatabaseError,
    ReadOnlyError,
    ReplacedDatabaseError,
    StorageUnavailableError,
)

__all__ = ["STALL_CREDIT_MIN_MS", "Database"]

T = TypeVar("T")

logger = logging.getLogger("sqliteq")

# Pause before another BEGIN IMMEDIATE when SQLite answered "busy" without waiting (seconds).
_BEGIN_PAUSE = 0.01
# A write that waited at least this long for the write lock (ms, lease clock) gives the wait
# back to the leases that were alive when it began (see Database.transaction).
STALL_CREDIT_MIN_MS = 1000
# The operations that put jobs into the file: refused once the path names another file.
ADDS = frozenset({"enqueue", "requeue_dead", "open_queue"})
# The operations whose commit can make jobs takeable at once ring the doorbell after it: those
# whose name starts with one of these (so "enqueue_many" and the like ring too).
RINGS = ("enqueue", "release", "requeue_dead", "publish")
# Failed attempts further apart than this (ms) are not one stall.
STALL_GAP_MS = 5000
# SQLite primary result codes (the sqlite3 module names them only from Python 3.11 on).
_SQLITE_CORRUPT = 11
_SQLITE_NOTADB = 26


class Database:
    """One read-write connection to a sqliteq file, safe to use from any thread."""

    def __init__(
        self,
        path: str,
        conn: sqlite3.Connection | None,
        read_conn: sqlite3.Connection,
        clock: Clock,
        busy_timeout: float,
        *,
        lease_clock: Clock | None = None,
        read_query: str = "",
    ) -> None:
        """``conn`` is the write connection; ``None`` for a file opened read-only.

        ``clock`` gives wall-clock milliseconds, ``lease_clock`` the milliseconds lease
        deadlines are kept in (default: ``clock``). ``read_query``: the URI parameters the
        read connection of a read-only file was opened with.
        """
        self.path = path
        # The file the connections opened (device, inode), taken just after they opened it.
        self._file_id = _file_id(path)
        self._replaced_logged = False  # check_file logged the current replacement
        self.lease_clock: Clock = lease_clock or clock
        # Lease-clock time at which a write of this process first failed to get the write lock
        # in the current run of failures (attempts at most STALL_GAP_MS apart); None after a
        # success.
        self._blocked_since: int | None = None
        self._blocked_until = 0  # when the last failed attempt gave up (lease clock)
        self.read_only = conn is None
        # A read-only connection that reads the main file as immutable (no writer had the file
        # open): it is opened again through the WAL once a writer appears.
        self._immutable = self.read_only and "immutable" in read_query
        self.clock = clock
        self.busy_timeout = busy_timeout
        # Protects _conn and _closed: one transaction at a time on the connection (sqlite3
        # connections must not interleave transactions), and no statement after close().
        self._lock = threading.Lock()
        self._conn = conn
        # Protects _read_conn: one statement at a time on it, none after close().
        self._read_lock = threading.Lock()
        self._read_conn = read_conn
        self._closed = False
        # Wakes the watchers of other processes after a commit that added jobs, and those that
        # follow record ends after a commit that ended records.
        self._ringer = Ringer(path) if conn is not None else None
        # Set by ended_records() inside the transaction under way (guarded by _lock).
        self._ended_records = False
        # Checkpoints the WAL off the commit path (see sqliteq._checkpoint).
        self._checkpointer: Checkpointer | None = None
        if conn is not None:
            conn.execute(_sql.SET_WAL_AUTOCHECKPOINT.format(pages=BACKSTOP_PAGES))
            # Checkpoints sync the files as the commits' own level says (OFF: not at all).
            level = int(conn.execute(_sql.READ_SYNCHRONOUS).fetchone()[0])
            self._checkpointer = Checkpointer(
                path, busy_timeout, self._lock, self.replaced, synchronous=level
            )
        # Conditions already logged; cleared by the next success, so that a condition that
        # comes back is reported again, but a retry loop is reported once.
        self._warned: set[str] = set()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def transaction(self, body: Callable[[sqlite3.Connection, int], T], op: str = "write") -> T:
        """Run ``body(conn, now)`` in one write transaction; raise on any failure.

        ``now`` is read from the clock after the write lock is held, so a deadline is never
        computed from a time that passed while waiting for the lock.

        A write that waited long for the lock (``STALL_CREDIT_MIN_MS``, counted from this
        process's first failed attempt in a row) first gives that time back to the leases that
        were alive when the wait began: while the file was locked nobody could renew a lease,
        so no take may treat one as run out for it. The stall end is recorded in the file, so
        the writers that waited out one stall credit it once between them. Raises
        :class:`~sqliteq.errors.ClosedError` once closed, and
        :class:`~sqliteq.errors.StorageUnavailableError` when the file cannot answer (the
        transaction rolled back).
        """
        with self._lock:
            if self._closed:
                raise ClosedError(f"sqliteq: {self.path} is closed")
            conn = self._conn
            if conn is None:
                raise ReadOnlyError(
                    f"sqliteq: {op} on {self.path} refused: the file was opened read-only"
                )
            self._check_before_write(op)
            asked = self.lease_clock()
            try:
                try:
                    self._begin_immediate(conn)
                except sqlite3.OperationalError as exc:
                    if is_busy(exc):
                        if self._blocked_since is None or self._gap(asked):
                            self._blocked_since = asked
                        self._blocked_until = self.lease_clock()
                    raise
                self._ended_records = False
                try:
                    since, self._blocked_since = self._blocked_since, None
                    if since is None or self._gap(asked):
                        since = asked
                    self._credit_stall(conn, min(since, asked))
                    result = body(conn, self.clock())
                    conn.execute(_sql.COMMIT)
                except BaseException:
                    if conn.in_transaction:
                        conn.execute(_sql.ROLLBACK)
                    raise
            except sqlite3.Error as exc:
                raise self._unavailable(op, exc) from exc
            self._warned.clear()
            self._after_commit(op)
            return result

    def times(self, now: int) -> dict[str, int]:
        """The times a statement binds: ``now`` (the wall clock, as the transaction read it)
        and ``lease_now`` (the lease clock, read now)."""
        return {"now": now, "lease_now": self.lease_clock()}

    def ended_records(self) -> None:
        """The transaction under way ends job records: its commit rings the watchers that
        follow record ends (``result_of`` waits), wherever they are."""
        self._ended_records = True

    def _after_commit(self, op: str) -> None:
        """The one hook after a committed write transaction (never before: a watcher woken
        then would find nothing new and sleep a whole poll interval)."""
        if self._ringer is not None:
            if op.startswith(RINGS):
                self._ringer.ring()
            elif self._ended_records:
                self._ringer.ring(ends_only=True)
        if self._checkpointer is not None:
            self._checkpointer.committed()

    def write(self, op: str, body: Callable[[sqlite3.Connection, int], T], default: T) -> T:
        """Like :meth:`transaction`; ``default`` (the "nothing" answer) once closed."""
        try:
            return self.transaction(body, op)
        except ClosedError:
            return default

    def read(self, op: str, body: Callable[[sqlite3.Connection, int], T], default: T) -> T:
        """Run ``body(conn, now)`` on the read connection (each statement sees one snapshot).

        ``default`` once closed; raises :class:`~sqliteq.errors.StorageUnavailableError` when
        the file cannot be read.
        """
        with self._read_lock:
            if self._closed:
                return default
            try:
                return body(self._reader(), self.clock())
            except sqlite3.Error as exc:
                raise self._unavailable(op, exc) from exc

    def query(self, body: Callable[[sqlite3.Connection, int], T], op: str = "read") -> T:
        """Like :meth:`read`, but raise :class:`~sqliteq.errors.ClosedError` once closed."""
        with self._read_lock:
            if self._closed:
                raise ClosedError(f"sqliteq: {self.path} is closed")
            try:
                return body(self._reader(), self.clock())
            except sqlite3.Error as exc:
                raise self._unavailable(op, exc) from exc

    def warn_once(self, condition: str, message: str) -> None:
        """Log ``message`` as a warning unless ``condition`` was logged since the last success."""
        if condition not in self._warned:
            self._warned.add(condition)
            logger.warning(message)

    def close(self) -> None:
        """Close the connections; later operations give their "nothing" answer."""
        if self._checkpointer is not None:  # first: its thread may wait for self._lock
            self._checkpointer.close()
        with self._lock, self._read_lock:
            if self._closed:
                return
            self._closed = True
            if self._ringer is not None:
                self._ringer.close()
            if self._conn is not None:
                self._conn.close()
            self._read_conn.close()

    def _reader(self) -> sqlite3.Connection:
        """The read connection; a read-only one reads through the WAL once a writer came."""
        if self._immutable and Path(self.path + "-wal").exists():
            query = read_only_query(self.path)
            if "immutable" not in query:
                fresh = connect(self.path, busy_timeout=self.busy_timeout, uri_query=query)
                fresh.execute(_sql.SET_QUERY_ONLY)
                fresh.execute(_sql.SET_TEMP_STORE_MEMORY)
                self._read_conn.close()
                self._read_conn = fresh
                self._immutable = False
        return self._read_conn

    def _unavailable(self, op: str, exc: sqlite3.Error) -> StorageUnavailableError:
        """The error to raise for ``exc``, logged once per condition."""
        if _is_corrupt(exc):
            error: StorageUnavailableError = DamagedDatabaseError(
                self.path, op, f"the database file is corrupt ({exc})"
            )
        elif isinstance(exc, sqlite3.OperationalError) and is_busy(exc):
            error = StorageUnavailableError(
                self.path,
                op,
                f"the file stayed locked by another connection for more than busy_timeout "
                f"({self.busy_timeout:g} s) ({exc})",
            )
        else:
            error = StorageUnavailableError(self.path, op, str(exc))
        self.warn_once(f"{op}:{type(error).__name__}", str(error))
        return error

    def replaced(self) -> str | None:
        """Why the path no longer names the file this process opened; ``None`` if it does.

        One ``os.stat`` of the path, compared with the device and inode seen at open.
        """
        if self._file_id is None:
            return None
        try:
            now = _file_id(self.path, missing_ok=False)
        except FileNotFoundError:
            return "the file was deleted or moved away since this process opened it"
        except OSError as exc:
            return f"the path cannot be checked ({exc.strerror})"
        if now != self._file_id:
            return "the path now names another file (the one this process opened was replaced)"
        return None

    def check_file(self) -> None:
        """Log an error, once per condition, if the path no longer names the opened file."""
        reason = self.replaced()
        if reason is None:
            self._replaced_logged = False
        elif not self._replaced_logged:
            self._replaced_logged = True
            logger.error(
                "sqliteq: %s: %s; adds are refused, jobs already in it can still be taken and "
                "finished by this process",
                self.path,
                reason,
            )

    def _check_before_write(self, op: str) -> None:
        """Log if the path names another file now; refuse ``op`` then if it is an add."""
        # The common case in one stat and no further call (it runs before every write).
        try:
            st = os.stat(self.path)
        except OSError:
            pass  # replaced() says why
        else:
            if (st.st_dev, st.st_ino) == self._file_id:
                self._replaced_logged = False
                return
        reason = self.replaced()
        if reason is None:
            self._replaced_logged = False
            return
        self.check_file()
        if op not in ADDS:
            return  # jobs already in the file this process has open can still be finished
        raise ReplacedDatabaseError(
            self.path, op, f"{reason}; nothing was added (reopen the file to add jobs)"
        )

    def _gap(self, asked: int) -> bool:
        """Whether this process stopped trying for a while before ``asked``: a failure that
        long ago says nothing about the file being locked since."""
        return asked - self._blocked_until > STALL_GAP_MS

    def _credit_stall(self, conn: sqlite3.Connection, since: int) -> None:
        """Give the leases alive at ``since`` the time the file was locked since then."""
        got = self.lease_clock()
        if got - since < STALL_CREDIT_MIN_MS:
            return
        row = conn.execute(_sql.READ_LEASE_CLOCK).fetchone()
        since = max(since, int(row[1])) if row else since
        if got - since < STALL_CREDIT_MIN_MS:
            return
        conn.execute(_sql.CREDIT_STALLED_LEASES, {"credit": got - since, "since": since})
        conn.execute(_sql.SET_STALL_CREDITED, {"until": got})
        logger.info(
            "sqliteq: %s was locked against writes for %.1f s; leases alive then were extended "
            "by that time",
            self.path,
            (got - since) / 1000,
        )

    def _begin_immediate(self, conn: sqlite3.Connection) -> None:
        """Take the write lock, waiting at most ``busy_timeout`` seconds in all."""
        deadline = time.monotonic() + self.busy_timeout
        shortened = False
        try:
            while True:
                try:
                    conn.execute(_sql.BEGIN_IMMEDIATE)
                    return
                except sqlite3.OperationalError as exc:
                    left = deadline - time.monotonic() - _BEGIN_PAUSE
                    if not is_busy(exc) or left <= 0:
                        raise
                # SQLite answered "busy" without waiting its busy timeout out (it does so when
                # waiting could deadlock): try again, within what is left of the deadline.
                time.sleep(_BEGIN_PAUSE)
                conn.execute(_sql.SET_BUSY_TIMEOUT.format(ms=max(1, int(left * 1000))))
                shortened = True
        finally:
            if shortened:
                conn.execute(_sql.SET_BUSY_TIMEOUT.format(ms=round(self.busy_timeout * 1000)))


def _is_corrupt(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code & 0xFF in (_SQLITE_CORRUPT, _SQLITE_NOTADB)
    text = str(exc)
    return "malformed" in text or "not a database" in text


def _file_id(path: str, *, missing_ok: bool = True) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if missing_ok:
            return None
        raise
    return (st.st_dev, st.st_ino)
