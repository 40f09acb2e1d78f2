"""WAL checkpoints of one ``Queues``, run on a thread of their own instead of inside a ``COMMIT``.

SQLite checkpoints automatically inside the ``COMMIT`` that makes the WAL pass
``wal_autocheckpoint`` pages (1,000 by default): that commit copies the WAL's pages into the
main file and syncs both, which made a single add's ``COMMIT`` a third slower on average (an
add dirties three pages: a checkpoint every ~330 adds) and put a tail of milliseconds on the
commits that did it, and on every thread waiting for the write lock behind them.

So the write connection checkpoints automatically only as a backstop (:data:`BACKSTOP_PAGES`,
should this thread fall behind), and :meth:`Checkpointer.committed`, called after each commit,
wakes a thread (``sqliteq:checkpoint``, started by the first call) every :data:`EVERY_COMMITS`
commits to run ``PRAGMA wal_checkpoint(PASSIVE)`` on its own connection. A passive checkpoint
takes no write lock: commits go on meanwhile. The WAL restarts from its beginning at the next
commit once everything in it was copied, as after an automatic checkpoint, so once the WAL
holds :data:`RESTART_PAGES` pages a second, short pass copies what was committed during the
first with this process's commits held back. A checkpoint
that fails (the file busy, unavailable) is logged and left to the next one or the backstop: the
commits it would have copied are already safe in the WAL.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import weakref
from collections.abc import Callable

from ._open import connect

__all__ = ["BACKSTOP_PAGES", "EVERY_COMMITS", "RESTART_PAGES", "Checkpointer"]

logger = logging.getLogger("sqliteq")

EVERY_COMMITS = 250
"""Commits between two checkpoints of the thread (about 750 WAL pages of single adds)."""

RESTART_PAGES = 3000
"""WAL pages (12 MB) from which a checkpoint of the thread also lets the WAL restart from its
beginning."""

BACKSTOP_PAGES = 8000
"""``wal_autocheckpoint`` of the write connection: the WAL size (pages, 32 MB) at which a
commit checkpoints by itself because the thread fell behind."""

_CHECKPOINT = "PRAGMA wal_checkpoint(PASSIVE)"
_SET_SYNCHRONOUS = "PRAGMA synchronous = {level:d}"


class Checkpointer:
    """Runs the WAL checkpoints of the file at ``path`` on one thread (see the module)."""

    def __init__(
        self,
        path: str,
        busy_timeout: float,
        writes: threading.Lock,
        replaced: Callable[[], str | None],
        *,
        synchronous: int,
    ) -> None:
        """``writes``: the lock this process's write transactions on the file hold;
        ``replaced``: why ``path`` no longer names the file opened (``None`` if it does);
        ``synchronous``: the write connection's ``PRAGMA synchronous`` (0-3), which decides
        whether a checkpoint syncs the files."""
        self._path = path
        self._synchronous = synchronous
        self._writes = writes
        self._replaced = replaced
        self._busy_timeout = busy_timeout
        self._commits = 0  # since the last wake-up; only the committing thread changes it
        # Protects _thread and _closed; _wake is set to ask for a checkpoint (or the end).
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self._failing = False  # a failure was logged; the next success clears it
        _instances.add(self)

    def committed(self) -> None:
        """Count one commit; every ``EVERY_COMMITS`` wake the thread (called under the write
        connection's lock, after the commit)."""
        self._commits += 1
        if self._commits < EVERY_COMMITS:
            return
        self._commits = 0
        with self._lock:
            if self._closed:
                return
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sqliteq:checkpoint", daemon=True
                )
                self._thread.start()
        self._wake.set()

    def close(self) -> None:
        """Stop the thread (after the checkpoint it runs, if any). Idempotent."""
        with self._lock:
            self._closed = True
            thread = self._thread
        self._wake.set()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                self._wake.wait()
                self._wake.clear()
                if self._closed:
                    return
                if conn is None and self._replaced() is not None:
                    continue  # never open (and checkpoint) another file found at the path
                try:
                    if conn is None:
                        conn = connect(self._path, busy_timeout=self._busy_timeout)
                        conn.execute(_SET_SYNCHRONOUS.format(level=self._synchronous))
                    self._checkpoint(conn)
                    self._failing = False
                except Exception as exc:  # the next checkpoint, or the backstop, copies them
                    if not self._failing:  # once per run of failures, not once per attempt
                        self._failing = True
                        logger.warning("sqliteq: %s: WAL checkpoint failed: %s", self._path, exc)
        finally:
            if conn is not None:
                conn.close()

    def _checkpoint(self, conn: sqlite3.Connection) -> None:
        """Copy the WAL into the main file, then let the next commit restart the WAL.

        The first pass copies the bulk while commits go on. The WAL restarts only once all of it
        is copied, so once the WAL holds ``RESTART_PAGES`` a second pass copies what was
        committed meanwhile (a few pages, most of them copied already) with this process's
        commits held back; another process committing then only delays the restart. The second
        pass syncs both files again (about 1 ms), hence not after every first pass.
        """
        _, wal_pages, _ = conn.execute(_CHECKPOINT).fetchone()
        if wal_pages < RESTART_PAGES:
            return
        with self._writes:
            if not self._closed:
                conn.execute(_CHECKPOINT).fetchall()

    def _forked(self) -> None:
        """In a fork child: the parent's thread is not here; a new one starts when needed."""
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread = None
        self._commits = 0


# Every Checkpointer of the process, reset in a fork child (see _forked).
_instances: weakref.WeakSet[Checkpointer] = weakref.WeakSet()


def _after_fork() -> None:
    for checkpointer in list(_instances):
        checkpointer._forked()


os.register_at_fork(after_in_child=_after_fork)
