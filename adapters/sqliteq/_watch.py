"""The watcher thread: tells subscribers that a job was added to their queue, by any process.

Why a thread: SQLite has no cross-process notification. Reading the jobs table in a loop
would cost a query per queue per tick; instead the thread polls ``PRAGMA data_version`` on its
own connection, which changes whenever another connection (in this process or another one)
commits and costs no page read. Only after a change does it read the per-queue ``enqueued``
counters (one small table) and call the callbacks of queues whose counter grew. Record
subscribers (``subscribe_records``) work alike on the per-queue ``ended`` counters: after one
grew, the thread reads the job ids that ended since (one range of ``job_records_ended``) and
calls ``callback(job_id)`` for each. While it has a records subscription, the thread's bell
socket is an ends one, rung by commits that ended records as well as by adds.

The thread waits on the doorbell (:mod:`sqliteq._doorbell`) between two polls: a process
that committed new jobs rings it, and the thread looks at once instead of at its next poll.
The poll stays as the safety net, and is all there is where the bell cannot be set up.

One watcher per ``Queues``, started by the first ``subscribe`` and stopped by
``Queues.close()``. It is a daemon thread because nothing guarantees the owner calls
``close()`` before the interpreter exits, and a forgotten watcher must not hang the exit.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import _sql
from ._doorbell import Listener
from ._open import connect

__all__ = ["POLL_INTERVAL", "Watcher"]

logger = logging.getLogger("sqliteq")

# Seconds between two data_version polls: the bound on notification latency when no ring
# comes (a process without the bell, a lost ring). Read when a Watcher is made.
POLL_INTERVAL = 0.02
# Seconds between two polls while the bell is bound and nobody waits for record ends: rings
# bring adds, so the poll is only the safety net for a lost ring, and a slower one halves an
# idle consumer's CPU. Record ends ring only watchers with a records subscription, and a
# ringer sees a new socket only at its next look at the bell directory (RELIST_INTERVAL), so
# such a watcher keeps POLL_INTERVAL as its safety net.
BELL_POLL_INTERVAL = 0.05
# Least seconds between two looks woken by rings (see _run).
RING_SPACING = 0.002
# Least seconds between two calls of on_tick (a stat of the path): much of an idle tick's
# cost if run on every poll.
TICK_INTERVAL = 0.1
# Seconds between two checks that the watcher's bell socket file is still there (another
# process may have removed it as stale); a missing one is bound again.
BELL_CHECK_INTERVAL = 5.0
# Most job ids told per queue and tick; beyond it, ends are skipped (waiters read again).
ENDS_PER_TICK = 1000


@dataclass
class _Subscription:
    queue: str
    callback: Callable[[str], None]
    owner: object
    seen: int  # the queue's enqueued counter already reported
    failed: bool = False  # the callback raised once already (logged once)
    records: bool = False  # told job ids of ended records, not "enqueued"


class Watcher:
    """Polls one database file and calls ``callback("enqueued")`` for subscribed queues."""

    def __init__(
        self,
        path: str,
        busy_timeout: float,
        interval: float | None = None,
        *,
        uri_query: str = "",
        on_tick: Callable[[], None] | None = None,
        bell: bool = True,
    ) -> None:
        """``bell``: wait on the doorbell between polls (``False`` for a file opened
        read-only: the bell is a socket file beside it, and read-only writes nothing)."""
        self._path = path
        self._bell = bell
        # Called at most every TICK_INTERVAL: the check that the path is still the file.
        self._on_tick = on_tick
        self._uri_query = uri_query  # how a read-only file is opened
        self._busy_timeout = busy_timeout
        self._interval = POLL_INTERVAL if interval is None else interval
        # Protects _subs, _recheck and _thread: the set of subscriptions the thread walks.
        self._lock = threading.Lock()
        self._subs: list[_Subscription] = []
        # A subscription added since the last counter read: read counters on the next tick even
        # if data_version did not change (its baseline may predate a commit already seen).
        self._recheck = False
        self._thread: threading.Thread | None = None
        self._listener: Listener | None = None  # the bell socket, while the thread runs
        self._stop = threading.Event()

    def subscribe(
        self,
        queue: str,
        callback: Callable[[str], None],
        owner: object,
        baseline: int,
        *,
        records: bool = False,
    ) -> None:
        """Call ``callback`` whenever ``queue``'s counter grows past ``baseline``."""
        with self._lock:
            if self._stop.is_set():
                return
            self._subs.append(_Subscription(queue, callback, owner, baseline, records=records))
            self._recheck = True
            if records and self._listener is not None and not self._listener.ends:
                self._listener.interrupt()  # the thread swaps its socket for an ends one
            if self._thread is None:
                conn = connect(
                    self._path, busy_timeout=self._busy_timeout, uri_query=self._uri_query
                )
                conn.execute(_sql.SET_QUERY_ONLY)
                # Bound before subscribe returns: a commit after it rings this process.
                self._listener = Listener.open(self._path, ends=records) if self._bell else None
                self._thread = threading.Thread(
                    target=self._run, args=(conn,), name="sqliteq:watch", daemon=True
                )
                self._thread.start()

    def subscribe_records(
        self, queue: str, callback: Callable[[str], None], owner: object, baseline: int
    ) -> None:
        """Call ``callback(job_id)`` for every record of ``queue`` that ends after the end
        numbered ``baseline``."""
        self.subscribe(queue, callback, owner, baseline, records=True)

    def unsubscribe(self, owner: object) -> None:
        """Forget every subscription made by ``owner`` (a closed queue)."""
        with self._lock:
            self._subs = [s for s in self._subs if s.owner is not owner]

    def close(self, timeout: float = 5.0) -> None:
        """Stop the thread and wait for it (a callback still running may delay this)."""
        self._stop.set()
        with self._lock:
            thread, self._thread = self._thread, None
            self._subs = []
            if self._listener is not None:
                self._listener.interrupt()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
            if thread.is_alive():
                logger.warning(
                    "sqliteq: the watcher of %s did not stop within %.1f s (a subscriber "
                    "callback is still running)",
                    self._path,
                    timeout,
                )

    def _run(self, conn: sqlite3.Connection) -> None:
        last_version: int | None = None
        warned = False
        next_tick = next_bell_check = looked = time.monotonic()
        rung_interval = max(self._interval, BELL_POLL_INTERVAL)
        records_waited = True  # until the subscriptions were read once
        try:
            while not self._stop.is_set():
                if self._listener is None:
                    self._stop.wait(self._interval)
                elif self._listener.wait(self._interval if records_waited else rung_interval):
                    # Rung: look at once after a quiet spell, but at most once per
                    # RING_SPACING while rings stream in, so that they are answered in
                    # batches (a look and a take per ring would cost the consumer more CPU
                    # per job than the jobs bring in).
                    pause = looked + RING_SPACING - time.monotonic()
                    if pause > 0:
                        self._stop.wait(pause)
                if self._stop.is_set():
                    break
                now = looked = time.monotonic()
                if now >= next_tick:
                    next_tick = now + TICK_INTERVAL
                    if self._on_tick is not None:
                        self._tick()
                if now >= next_bell_check:
                    next_bell_check = now + BELL_CHECK_INTERVAL
                    self._check_bell()
                try:
                    version = conn.execute(_sql.DATA_VERSION).fetchone()[0]
                    with self._lock:
                        recheck, self._recheck = self._recheck, False
                        subs = list(self._subs)
                    records_waited = any(sub.records for sub in subs)
                    if self._listener is not None and self._listener.ends != records_waited:
                        self._rebind_bell(ends=records_waited)
                    if version == last_version and not recheck:
                        continue
                    last_version = version
                    if not subs:
                        continue
                    counters: dict[str, int] = {}
                    if any(not sub.records for sub in subs):
                        counters = dict(conn.execute(_sql.QUEUE_COUNTERS).fetchall())
                    ends: dict[str, int] = {}
                    told: dict[tuple[str, int], list[str]] = {}
                    if any(sub.records for sub in subs):
                        ends = dict(conn.execute(_sql.QUEUE_ENDS).fetchall())
                        for sub in subs:
                            if sub.records and ends.get(sub.queue, 0) > sub.seen:
                                key = (sub.queue, sub.seen)
                                if key not in told:
                                    told[key] = self._ended_since(conn, *key)
                    warned = False
                except sqlite3.Error as exc:
                    if not warned:
                        warned = True
                        logger.warning("sqliteq: watching %s failed: %s", self._path, exc)
                    continue
                for sub in subs:
                    if sub.records:
                        count = ends.get(sub.queue, 0)
                        if count > sub.seen:
                            job_ids = told.get((sub.queue, sub.seen), [])
                            sub.seen = count
                            for job_id in job_ids:
                                self._notify(sub, job_id)
                        continue
                    count = counters.get(sub.queue, 0)
                    if count > sub.seen:
                        sub.seen = count
                        self._notify(sub)
        finally:
            conn.close()
            with self._lock:
                listener, self._listener = self._listener, None
            if listener is not None:
                listener.close()

    def _check_bell(self) -> None:
        """Bind a new bell socket if this one's file was removed (taken for a stale one)."""
        listener = self._listener
        if listener is not None and not listener.registered():
            self._rebind_bell(ends=listener.ends)

    def _rebind_bell(self, *, ends: bool) -> None:
        """Replace the bell socket by a new one, an ends one (rung by record ends too) or not:
        the first records subscription came, or the last one went."""
        listener = self._listener
        if listener is None:
            return
        fresh = Listener.open(self._path, ends=ends)
        with self._lock:
            self._listener = fresh
        listener.close()

    def _tick(self) -> None:
        assert self._on_tick is not None
        try:
            self._on_tick()
        except Exception:  # a check must never stop the notifications
            logger.exception("sqliteq: checking %s failed", self._path)

    @staticmethod
    def _ended_since(conn: sqlite3.Connection, queue: str, seen: int) -> list[str]:
        params = {"queue": queue, "seen": seen, "limit": ENDS_PER_TICK}
        return [str(row[0]) for row in conn.execute(_sql.ENDS_SINCE, params)]

    def _notify(self, sub: _Subscription, message: str = "enqueued") -> None:
        try:
            sub.callback(message)
        except Exception:
            if not sub.failed:
                sub.failed = True
                logger.exception(
                    "sqliteq: a subscriber callback of queue %r in %s raised", sub.queue, self._path
                )
