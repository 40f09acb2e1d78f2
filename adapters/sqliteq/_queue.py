"""What every sqliteq queue object does with its line of jobs: add, take, finish, look.

Every method maps to one transaction of statements from :mod:`sqliteq._sql`. A take claims
jobs and records their leases in one ``UPDATE ... RETURNING``: no crash can lose a job between
the two. Leases expire by time alone: a take treats a job whose lease ran out like a ready one,
so there is no reaper thread and opening a queue never steals live jobs. Delayed jobs need no
timer either: a take first promotes the due ones (one indexed ``UPDATE``). A queue object is
composed of its job records (:class:`~sqliteq._records.RecordStore`) and its dead-letter shelf
(:class:`~sqliteq._dead.DeadLetterShelf`), which its opener makes and passes in; the calls of
``IJobRecords`` and ``IDeadLetterable`` delegate to them. The four kinds of queue are in
:mod:`sqliteq._kinds`.

A method that cannot get an answer from the file raises
:class:`~sqliteq.errors.StorageUnavailableError` naming the file and the operation, with
nothing done (see :class:`~sqliteq._database.Database`); its answers (``[]``, ``None``,
``False``, ``0``) always mean what they say. Bad arguments raise, before anything is
written, by the rules of :mod:`varmq.contract.rules`.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Literal

from varmq.contract.protocols import DeadLetterRecord, QueueStats, RateStats, StoredJobRecord
from varmq.contract.rules import (
    as_bytes,
    check,
    check_job_id,
    check_keys,
    delay_ms,
    occurrence_mark,
    payload,
)

from . import _schema, _sql
from ._database import Database
from ._dead import DeadLetterShelf
from ._options import QueueSettings
from ._rates import RateWindow
from ._records import Outcome, RecordStore
from ._retention import DONE, keep_within
from ._watch import Watcher
from ._workers import WorkerRegistry
from ._writer import Add, Writer
from .errors import ClosedError

__all__ = ["StoredQueue", "subject_of"]

LeaseAnswer = Literal["held", "lost", "cancel"]


def subject_of(db: Database, name: str) -> str:
    """What every error message about the queue ``name`` starts with."""
    return f"sqliteq: queue {name!r} in {db.path}"


class StoredQueue:
    """What FIFO and priority queues share; the kinds differ only in ``enqueue``'s shape."""

    #: The worker records of the file (``IHasWorkerRegistry``), set by the opener.
    worker_registry: WorkerRegistry

    def __init__(
        self,
        db: Database,
        name: str,
        settings: QueueSettings,
        *,
        watcher: Watcher,
        writer: Writer,
        records: RecordStore,
        dead: DeadLetterShelf,
    ) -> None:
        self._db = db
        self._writer = writer  # stores the adds (group commit; the thread for coroutines)
        self._watcher = watcher
        self._records = records
        self._dead = dead
        self._name = name
        self._subject = subject_of(db, name)  # starts every error message
        self._visibility_timeout = float(settings.visibility_timeout)
        self._lease_ms = max(1, round(settings.visibility_timeout * 1000))
        self._remove_on_complete = bool(settings.remove_on_complete)
        self._completed_limit = settings.completed_limit
        self._completed_max_age_ms = round(settings.completed_max_age * 1000)
        self._keep_ms = records.keep_ms
        self._max_payload = settings.max_payload
        self._rate_limit = settings.rate_limit
        self._rates = (
            None if settings.rate_limit is None else RateWindow(name, *settings.rate_limit)
        )
        # Set once by close(); read without a lock (a bool write is atomic).
        self._closed = False
        # Set by set_capacity(); 0: unlimited. Read once per enqueue, when it is prepared,
        # without a lock (an int write is atomic); it limits this object's enqueues only.
        self._capacity = 0

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._name!r} in {self._db.path}>"

    @property
    def name(self) -> str:
        """The queue's name in the file."""
        return self._name

    @property
    def rate_limit(self) -> tuple[int, float] | None:
        """``(count, seconds)``: at most ``count`` jobs start in any window of ``seconds``,
        across every process of the file; ``None``: no limit."""
        return self._rate_limit

    def throttled_for(self) -> float:
        """Seconds until the rate window lets another job start, as this object's last take
        saw it (0.0 unless the limit cut that take short)."""
        return 0.0 if self._rates is None else self._rates.throttled_for

    @property
    def lease_seconds(self) -> float:
        """How long a lease lasts after a take or an extension (the visibility timeout)."""
        return self._visibility_timeout

    # --- adding ------------------------------------------------------------------------------

    def set_capacity(self, capacity: int) -> None:
        """Refuse enqueues through this object once ``capacity`` jobs wait (0: unlimited).

        Waiting means what ``len()`` counts: ready jobs and jobs whose lease expired, added by
        any process; leased jobs do not count. The count and the insert run in one
        transaction, so concurrent enqueues from any number of connections never exceed it.
        The first capacity set on a file installs the counter that makes the check cheap
        (one write transaction, a count of the ready jobs); raises
        :class:`~sqliteq.errors.StorageUnavailableError` if that fails (retry it).
        """
        check(self._subject, "capacity", capacity)
        if capacity:
            self._install_capacity()
        self._capacity = capacity

    def _install_capacity(self) -> None:
        """Install the ready counter's triggers in the file, once per file (any process)."""

        def body(conn: sqlite3.Connection, now: int) -> None:
            if conn.execute(_schema.CAPACITY_INSTALLED).fetchone() is None:
                for statement in _schema.INSTALL_CAPACITY:
                    conn.execute(statement)

        with contextlib.suppress(ClosedError):  # nothing can be enqueued through a closed file
            self._db.transaction(body, "set_capacity")

    def _prepare(self, item: Any, priority: int, job_id: str | None, wait_ms: int) -> Add | None:
        """The add of the checked ``item``; ``None`` once closed (the kinds check ``priority``
        and ``job_id`` first)."""
        data = payload(self._subject, item, self._max_payload)
        if self._closed:
            return None
        if wait_ms > 0:
            statement = _sql.ENQUEUE_DELAYED
        elif job_id is None:
            # A plain add binds only what ENQUEUE reads: many of them go in one executemany.
            params: dict[str, object] = {"queue": self._name, "priority": priority, "data": data}
            return Add(self._name, _sql.ENQUEUE, params, self._capacity)
        else:
            statement = _sql.ENQUEUE_DEDUP
        params = {
            "queue": self._name,
            "priority": priority,
            "data": data,
            "job_id": job_id,
            "delay_ms": wait_ms,
            # A job with an id added through an object that keeps records: its row is its
            # record until it ends.
            "keep_ms": self._keep_ms if job_id is not None and self._keep_ms > 0 else None,
        }
        return Add(self._name, statement, params, self._capacity, job_id, wait_ms <= 0)

    def _add(self, item: Any, priority: int, job_id: str | None, wait_ms: int = 0) -> bool:
        """Store the checked ``item``, maybe in one transaction with concurrent adds (see
        :mod:`sqliteq._writer`); ``False`` if refused."""
        add = self._prepare(item, priority, job_id, wait_ms)
        return False if add is None else self._writer.store([add])[0]

    async def _add_async(
        self, item: Any, priority: int, job_id: str | None, wait_ms: int = 0
    ) -> bool:
        """:meth:`_add` for a coroutine: stored on the writer thread (see
        :mod:`sqliteq._writer`)."""
        add = self._prepare(item, priority, job_id, wait_ms)
        return False if add is None else await self._writer.store_async(add)

    def enqueue_dedup(self, item: Any, job_id: str, priority: int | None = None) -> bool:
        """Store ``item`` unless a job with ``job_id`` is stored; ``True`` in both cases.

        ``False`` if refused. FIFO queues ignore ``priority``; priority queues take ``None``
        as 0.
        """
        rank = self._rank(priority)
        return self._add(item, rank, check_job_id(self._subject, job_id))

    def enqueue_occurrence(
        self,
        item: Any,
        job_id: str,
        schedule: str,
        occurrence: float,
        priority: int | None = None,
    ) -> bool:
        """``enqueue_dedup`` unless the queue's mark of ``schedule`` is at or after
        ``occurrence``, the mark moved in the same transaction (``IScheduleMarks``; the
        ``schedule_marks`` table)."""
        rank = self._rank(priority)
        job_id = check_job_id(self._subject, job_id)
        mark = occurrence_mark(self._subject, schedule, occurrence)
        add = self._prepare(item, rank, job_id, 0)
        if add is None:
            return False
        add.mark = mark
        return self._writer.store([add])[0]

    def enqueue_delayed(
        self,
        item: Any,
        delay: float,
        job_id: str | None = None,
        priority: int | None = None,
    ) -> bool:
        """Store ``item``, handed out no sooner than ``delay`` seconds from now.

        Once due it joins the end of its priority's line (``delay <= 0``: now). With a
        ``job_id``, deduplicates like ``enqueue_dedup``. FIFO queues ignore ``priority``;
        priority queues take ``None`` as 0. ``False`` if refused.
        """
        return self._add(item, *self._delayed(delay, job_id, priority))

    async def enqueue_dedup_async(
        self, item: Any, job_id: str, priority: int | None = None
    ) -> bool:
        """:meth:`enqueue_dedup` for a coroutine: the event loop never waits on the file."""
        rank = self._rank(priority)
        return await self._add_async(item, rank, check_job_id(self._subject, job_id))

    async def enqueue_delayed_async(
        self, item: Any, delay: float, job_id: str | None = None, priority: int | None = None
    ) -> bool:
        """:meth:`enqueue_delayed` for a coroutine: the event loop never waits on the file."""
        return await self._add_async(item, *self._delayed(delay, job_id, priority))

    def _delayed(
        self, delay: float, job_id: str | None, priority: int | None
    ) -> tuple[int, str | None, int]:
        """The checked ``(priority, job_id, delay in ms)`` of a delayed add."""
        rank = self._rank(priority)
        if job_id is not None:
            job_id = check_job_id(self._subject, job_id)
        return rank, job_id, delay_ms(self._subject, delay)

    def _rank(self, priority: Any) -> int:
        """The priority to store for the optional ``priority`` argument: 0 on a FIFO queue."""
        return 0

    def _priority(self, priority: Any) -> int:
        """A priority queue's checked priority."""
        return int(check(self._subject, "priority", priority))

    # --- taking ------------------------------------------------------------------------------

    def dequeue_batch_with_attempts(self, n: int) -> list[tuple[bytes, str, int]]:
        """Take and lease up to ``n`` jobs: ``(data, ack_id, delivery count)``, in take order."""
        check(self._subject, "n", n)
        if self._closed or n <= 0:
            return []

        def body(conn: sqlite3.Connection, now: int) -> list[Any]:
            times = self._db.times(now)
            params: dict[str, Any] = {
                "queue": self._name,
                **times,
                "lease_ms": self._lease_ms,
                "n": n,
            }
            # Jobs cancelled while they ran whose lease ran out are not takeable: they end
            # (cancelled) here, and only then does the take call the record store.
            swept = conn.execute(_sql.SWEEP_CANCELLED, params).fetchall()
            if swept:
                self._records.end_rows(conn, now, swept, "cancelled")
            conn.execute(_sql.PROMOTE_DUE, params)
            rates = self._rates
            if rates is None:
                return conn.execute(_sql.CLAIM, params).fetchall()
            params["n"] = allowed = rates.allowance(conn, times["lease_now"], n)
            claimed = conn.execute(_sql.CLAIM, params).fetchall() if allowed else []
            rates.started(conn, times["lease_now"], len(claimed))
            return claimed

        rows: list[Any] = self._db.write("take", body, [])
        # RETURNING gives no order; take order is (priority, available_at, id).
        rows.sort(key=lambda row: (row[1], row[2], row[0]))
        return [(bytes(data), token, attempts) for _, _, _, data, token, attempts in rows]

    def dequeue_batch_with_ack_ids(self, n: int) -> list[tuple[bytes, str]]:
        """Take and lease up to ``n`` jobs, each with its own ack id, in take order."""
        return [(data, token) for data, token, _ in self.dequeue_batch_with_attempts(n)]

    def dequeue_with_ack_id(self) -> tuple[bytes, str] | None:
        """Take and lease the next job; ``None`` when nothing is ready."""
        taken = self.dequeue_batch_with_attempts(1)
        return (taken[0][0], taken[0][1]) if taken else None

    def dequeue(self) -> bytes | None:
        """Take the next job for good, without a lease; ``None`` when nothing is ready."""
        if self._closed:
            return None
        statement = _sql.TAKE_DELETE if self._remove_on_complete else _sql.TAKE_DONE

        def body(conn: sqlite3.Connection, now: int) -> bytes | None:
            times = self._db.times(now)
            params = {"queue": self._name, **times}
            conn.execute(_sql.PROMOTE_DUE, params)
            rates = self._rates
            if rates is not None and not rates.allowance(conn, times["lease_now"], 1):
                return None
            row = conn.execute(statement, params).fetchone()
            if rates is not None:
                rates.started(conn, times["lease_now"], 0 if row is None else 1)
            if row is None:
                return None
            if not self._remove_on_complete:
                self._keep_done(conn, now, 1)
            data, job_id, attempts, keep_ms, enqueued_at = row
            # Taken for good: nobody will report another outcome.
            taken = (job_id, attempts, now, 0, keep_ms, enqueued_at)
            self._records.end(conn, now, [("succeeded", None, None, taken)])
            return bytes(data)

        return self._db.write("take", body, None)

    # --- finishing -----------------------------------------------------------------------------

    def acknowledge(self, ack_id: str) -> bool:
        """Finish the job leased under ``ack_id``; ``False`` if unknown, expired or taken over."""
        return self.acknowledge_many([ack_id])[0]

    def acknowledge_many(self, ack_ids: Sequence[str]) -> list[bool]:
        """Acknowledge each id in one transaction; one result per id, in order.

        A job with a record is recorded ``"succeeded"`` (without a result) in the same
        transaction.
        """
        return self._acknowledge([(ack_id, None) for ack_id in ack_ids])

    def _acknowledge(self, settled: Sequence[tuple[Any, bytes | None]]) -> list[bool]:
        """Acknowledge each ``(ack_id, result)`` and end the records, in one transaction."""
        if not settled:
            return []
        refused = [False] * len(settled)
        keep_done = not self._remove_on_complete
        tokens = list(dict.fromkeys(ack_id for ack_id, _ in settled if isinstance(ack_id, str)))

        def body(conn: sqlite3.Connection, now: int) -> list[bool]:
            # What each settled lease returned, by token: a few statements for the whole batch.
            found: dict[str, Any] = {}
            lease_now = self._db.lease_clock()
            if keep_done:
                params = {"queue": self._name, "now": now, "lease_now": lease_now}
                for token in tokens:
                    params["token"] = token
                    found[token] = conn.execute(_sql.ACK_DONE, params).fetchone()
            else:
                for start in range(0, len(tokens), _sql.ACK_CHUNK):
                    chunk = tokens[start : start + _sql.ACK_CHUNK]
                    size = _sql.padded_size(len(chunk))
                    padded = chunk + chunk[-1:] * (size - len(chunk))  # IN finds it once
                    rows = conn.execute(
                        _sql.acknowledge_leases(size), [self._name, lease_now, *padded]
                    )
                    for row in rows:
                        found[row[0]] = row[1:]
            results = []
            ends: list[Outcome] = []
            for ack_id, result in settled:
                # pop: an id given twice is acknowledged once, as two statements would do.
                row = found.pop(ack_id, None) if isinstance(ack_id, str) else None
                results.append(row is not None)
                if row is not None and row[4] is not None:  # keep_ms: the job has a record
                    ends.append(("succeeded", result, None, row))
            if keep_done and any(results):
                self._keep_done(conn, now, sum(results))
            if ends:
                self._records.end(conn, now, ends)
            return results

        return self._db.write("acknowledge", body, refused)

    def extend_lease(self, ack_id: str) -> bool:
        """Restart the lease of ``ack_id``; ``False`` when it was lost (expired, taken over)."""
        return self.extend_lease_or_cancel(ack_id) != "lost"

    def nack(self, ack_id: str, delay: float) -> bool:
        """Give the job leased under ``ack_id`` back, to be taken again after ``delay`` seconds.

        Fenced like ``acknowledge``: ``False`` when the lease is unknown, expired or taken
        over. The job keeps its priority and delivery count (its next take counts one more)
        and gets a new id: once due (``delay <= 0``: now) it is at the end of its priority's
        line, behind jobs already waiting at the same millisecond. Works after ``close()``.
        """
        wait_ms = delay_ms(self._subject, delay)
        if not isinstance(ack_id, str):
            return False

        def body(conn: sqlite3.Connection, now: int) -> bool:
            params = {
                "token": ack_id,
                "queue": self._name,
                **self._db.times(now),
                "delay_ms": wait_ms,
            }
            if conn.execute(_sql.NACK, params).rowcount == 1:
                return True
            return self._settle_cancelled(conn, now, params)

        return self._db.write("nack", body, False)

    def release(self, ack_id: str) -> bool:
        """Give back the job leased under ``ack_id``, which was never started, at once.

        In one transaction the job goes back to its place in line (priority, availability and
        order unchanged, as when its lease expires), available now, and this delivery does not
        count: the next take reports the same attempt again. Distributed queues hear
        ``"enqueued"``. Fenced like ``acknowledge``: ``False`` when the lease is unknown,
        expired or taken over. Works after ``close()``.
        """
        if not isinstance(ack_id, str):
            return False

        def body(conn: sqlite3.Connection, now: int) -> bool:
            params = {"token": ack_id, "queue": self._name, **self._db.times(now)}
            if conn.execute(_sql.RELEASE, params).rowcount != 1:
                return self._settle_cancelled(conn, now, params)
            conn.execute(_sql.BUMP_ENQUEUED, params)
            return True

        return self._db.write("release", body, False)

    def _settle_cancelled(self, conn: sqlite3.Connection, now: int, params: Any) -> bool:
        """A lease given back whose cancel was requested: its job ends ``"cancelled"`` instead
        of running again. Whether there was such a lease."""
        rows = conn.execute(_sql.SETTLE_CANCELLED, params).fetchall()
        if rows:
            self._records.end_rows(conn, now, rows, "cancelled")
        return bool(rows)

    def _keep_done(self, conn: sqlite3.Connection, now: int, added: int) -> None:
        """Count ``added`` completed jobs and drop those beyond the retention bounds."""
        cutoff = now - self._completed_max_age_ms
        keep_within(conn, DONE, self._name, added, cutoff=cutoff, limit=self._completed_limit)

    # --- settles with an outcome (job records) ----------------------------------------------

    def acknowledge_with_results(self, results: Sequence[tuple[str, Any]]) -> list[bool]:
        """Acknowledge each ``(ack_id, result)`` in one transaction, recording each job
        ``"succeeded"`` with its ``result`` bytes; one answer per pair, in order, as
        ``acknowledge_many`` gives. Works after ``close()``."""
        checked = [(ack_id, as_bytes(self._subject, r, "result")) for ack_id, r in results]
        return self._acknowledge(checked)

    def fail(self, ack_id: str, error: Any) -> bool:
        """End the job leased under ``ack_id`` for good: it leaves the queue and its record
        becomes ``"failed"`` with the ``error`` bytes (``"cancelled"`` when a cancel was
        requested), in one transaction. ``False`` when the lease is unknown, expired or taken
        over. Works after ``close()``."""
        detail = as_bytes(self._subject, error, "error")
        if not isinstance(ack_id, str):
            return False

        def body(conn: sqlite3.Connection, now: int) -> bool:
            params = {"token": ack_id, "queue": self._name, **self._db.times(now)}
            row = conn.execute(_sql.SETTLE_FAILED, params).fetchone()
            if row is None:
                return False
            self._records.end(conn, now, [("failed", None, detail, row)])
            return True

        return self._db.write("fail", body, False)

    def extend_lease_or_cancel(self, ack_id: str) -> LeaseAnswer:
        """Restart the lease of ``ack_id`` and say whether its job should stop: ``"held"``,
        ``"cancel"`` (extended, and a cancel was requested) or ``"lost"`` (expired, taken over
        or unknown). Raises :class:`~sqliteq.errors.StorageUnavailableError` when the file
        cannot answer."""
        if not isinstance(ack_id, str):
            return "lost"

        def body(conn: sqlite3.Connection, now: int) -> LeaseAnswer:
            params = {
                "token": ack_id,
                "queue": self._name,
                **self._db.times(now),
                "lease_ms": self._lease_ms,
            }
            row = conn.execute(_sql.EXTEND_LEASE, params).fetchone()
            if row is None:
                return "lost"
            return "cancel" if row[0] else "held"

        return self._db.write("extend_lease", body, "lost")

    def set_progress(self, ack_id: str, progress: Any) -> bool:
        """Store ``progress`` (bytes, or str as UTF-8) as the progress of the record of the job
        leased under ``ack_id``, in one transaction that changes nothing else of the job.
        ``False`` (nothing stored) when the lease is unknown, expired or taken over, or the job
        has no record. The next take of the job clears it; the settle that ends the job keeps
        it in the ended record. Works after ``close()``."""
        kept = as_bytes(self._subject, progress, "progress")
        if not isinstance(ack_id, str):
            return False

        def body(conn: sqlite3.Connection, now: int) -> bool:
            params = {
                "token": ack_id,
                "queue": self._name,
                **self._db.times(now),
                "progress": kept,
            }
            return conn.execute(_sql.SET_PROGRESS, params).rowcount == 1

        return self._db.write("set_progress", body, False)

    # --- job records (sqliteq._records) -------------------------------------------------------

    @property
    def keep_results(self) -> float:
        """Seconds an ended job's record is kept; ``0.0``: this object adds no records."""
        return self._records.keep_results

    def job_record(self, job_id: str) -> StoredJobRecord | None:
        """The record of ``job_id``; ``None`` when none is kept. Answers whatever this object's
        own ``keep_results`` (records belong to the queue); works on a read-only file."""
        return self._records.job_record(job_id)

    def cancel(self, job_id: str) -> bool:
        """Cancel ``job_id``: a queued or delayed job leaves the queue now (``"cancelled"``), a
        running one is flagged (``cancel_requested``) and its consumer hears it at its next
        renewal (``extend_lease_or_cancel``). Whether there was a job to cancel: ``False`` for
        an unknown id or an ended job."""
        return self._records.cancel(job_id)

    def subscribe_records(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(job_id)`` on the watcher thread after a record of this queue ended,
        through any object in any process (within about one watcher interval). Lossy: a record
        dropped before the watcher read it is not told. Ends when this object is closed."""
        if not self._closed:
            self._records.subscribe(callback, self)

    # --- dead letters (sqliteq._dead) ---------------------------------------------------------

    def dead_letter(self, ack_id: str, error: str) -> bool:
        """Move the job leased under ``ack_id`` to the dead letters, recording ``error``.

        Fenced like ``acknowledge``: ``False`` when the lease is unknown, expired or taken
        over. In the same transaction, drops the queue's dead letters older than this object's
        ``dead_letter_max_age`` and the oldest beyond its ``dead_letter_limit``. Works after
        ``close()``, like ``acknowledge``. A job with a record is recorded ``"dead"``; one
        whose cancel was requested ends ``"cancelled"`` instead of being shelved.
        """
        return self._dead.bury(ack_id, error, None)

    def dead_letter_with_error(self, ack_id: str, error: str, record_error: Any) -> bool:
        """``dead_letter`` that also records ``record_error`` (bytes) as the error of the job's
        ``"dead"`` record, in the same transaction."""
        detail = as_bytes(self._subject, record_error, "record_error")
        return self._dead.bury(ack_id, error, detail)

    def dead_letters(self, limit: int = 100) -> list[DeadLetterRecord]:
        """Up to ``limit`` dead letters of this queue, oldest first.

        ``key`` names one for :meth:`requeue_dead`; ``dead_at`` is in Unix seconds (the
        adapter clock).
        """
        return self._dead.letters(limit)

    def requeue_dead(self, keys: Sequence[str] | None = None) -> int:
        """Put the dead letters ``keys`` (all when ``None``) back in line; how many.

        Each becomes a new job at the end of its priority's line, available now, with its
        delivery count reset (the next take is attempt 1) and its job id back unless another
        stored job holds it meanwhile. Unknown keys, and keys of other queues, are ignored.
        Given keys are requeued in the order given; all of them, oldest first. ``0`` once this
        object is closed.
        """
        if self._closed:
            check_keys(self._subject, keys)
            return 0
        return self._dead.requeue(keys)

    def purge_dead(self) -> int:
        """Delete every dead letter of this queue; how many. ``0`` once this object is closed."""
        return 0 if self._closed else self._dead.purge()

    # --- looking -------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Jobs a take would get now (ready, due, or with an expired lease); 0 once closed."""
        if self._closed:
            return 0

        def body(conn: sqlite3.Connection, now: int) -> int:
            row = conn.execute(
                _sql.COUNT_TAKEABLE, {"queue": self._name, **self._db.times(now)}
            ).fetchone()
            return int(row[0])

        return self._db.read("len", body, 0)

    def values(self) -> list[bytes]:
        """A snapshot of the jobs a take would get now, in take order; empty once closed."""
        if self._closed:
            return []

        def body(conn: sqlite3.Connection, now: int) -> list[bytes]:
            rows = conn.execute(_sql.VALUES_TAKEABLE, {"queue": self._name, **self._db.times(now)})
            return [bytes(row[0]) for row in rows]

        return self._db.read("values", body, [])

    def stats(self) -> QueueStats:
        """Counts of this queue's jobs, in one statement (one snapshot), from every process.

        ``waiting`` (what ``len()`` counts), ``in_flight`` (leased, lease not expired),
        ``delayed`` (not due yet), ``dead`` (dead letters) and ``oldest_age``, the seconds
        since the oldest waiting job became available (0.0 when none waits). Reads one range
        of ``jobs_line`` and one of ``jobs_delayed`` (the queue's ready, leased and delayed
        jobs, index only) and the ``queues`` row. Works after ``close()``.
        """
        empty: QueueStats = {
            "waiting": 0,
            "in_flight": 0,
            "delayed": 0,
            "dead": 0,
            "oldest_age": 0.0,
        }

        def body(conn: sqlite3.Connection, now: int) -> QueueStats:
            times = self._db.times(now)
            row = conn.execute(_sql.STATS, {"queue": self._name, **times}).fetchone()
            waiting, in_flight, oldest, due, later, oldest_due, dead = row
            oldest_at = min((t for t in (oldest, oldest_due) if t is not None), default=now)
            stats: RateStats = {
                "waiting": int(waiting + due),
                "in_flight": int(in_flight),
                "delayed": int(later),
                "dead": int(dead or 0),
                "oldest_age": max(0, now - oldest_at) / 1000.0,
            }
            if self._rates is not None and self._rate_limit is not None:
                used = self._rates.used(conn, times["lease_now"])
                stats["rate_window_used"] = used
                stats["throttled"] = used >= self._rate_limit[0] and stats["waiting"] > 0
            return stats

        return self._db.read("stats", body, empty)

    def purge(self) -> None:
        """Remove every waiting job (due delayed ones too); their records end ``"cancelled"``.
        Leased jobs stay, so their workers can still ack them; delayed jobs that are not due
        stay delayed."""

        def body(conn: sqlite3.Connection, now: int) -> None:
            conn.execute(_sql.PROMOTE_DUE, {"queue": self._name, **self._db.times(now)})
            rows = conn.execute(_sql.PURGE_TAKEABLE, {"queue": self._name, **self._db.times(now)})
            self._records.end_rows(conn, now, rows.fetchall(), "cancelled")

        self._db.write("purge", body, None)

    def close(self) -> None:
        """Refuse enqueues and stop handing out jobs; stored jobs stay, acks still work."""
        self._closed = True
        self._watcher.unsubscribe(self)

    def _subscribe(self, callback: Callable[[str], None]) -> None:
        if self._closed:
            return

        def body(conn: sqlite3.Connection, now: int) -> int:
            row = conn.execute(_sql.QUEUE_COUNTER, {"queue": self._name}).fetchone()
            return int(row[0]) if row else 0

        # The baseline is read before the subscription exists: every enqueue committed after
        # this read is reported.
        baseline = self._db.read("subscribe", body, 0)
        self._watcher.subscribe(self._name, callback, self, baseline)
