"""Job records of a queue (schema version 6; progress: 7): what became of each job added with an
id.

:class:`RecordStore` is the record keeper a queue object is made with (and its dead-letter
shelf, :class:`~sqliteq._dead.DeadLetterShelf`, too). A queue object opened with
``keep_results=SECONDS`` stores a job added with an id with ``keep_ms`` set:
while the job is stored, its row is its record, and its state (queued, delayed, running) is
read from the row, so adds, takes, lease expiries and due delays write nothing more. Every
statement that takes such a job out of the queue (acknowledge, ``fail``, dead letter, cancel,
purge, a take for good) returns what its record needs and writes the ended record into
``job_records`` in the same transaction, fenced by the same lease token: a record never says
``succeeded`` for a job that will be handed out again.

An ended record holds its job id and is kept ``keep_results`` seconds (of the object that added
it) after it ended, and at most ``keep_results_limit`` (of the object that ends it) per queue,
pruned in the transaction that ends another: the ends are numbered, so the limit keeps the
records of the last ``keep_results_limit`` ends (one index range, O(records dropped)). A record
past its time is not read, and is dropped by a later end (an object drops those at most once a
second, with the ends it writes then).
Reads run on the read connection (one statement, one snapshot), so a file opened
``read_only=True`` reads records too.

The progress a running job sets (``set_progress`` of the queue object, fenced by its lease) is a
column of its row, cleared by every take, and goes into its ended record with the settle that
ends it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any

from varmq.contract.protocols import StoredJobRecord
from varmq.contract.rules import check_job_id

from . import _sql
from ._database import Database
from ._options import QueueSettings
from ._watch import Watcher

__all__ = ["Outcome", "RecordStore"]

AGE_PRUNE_EVERY_MS = 1000
"""How often (adapter clock, ms) an object's ends also drop the records whose time is up."""

# One job leaving the queue: (state, result, error) and the row the statements ending with
# _sql._SETTLED return: (job_id, attempts, started_at, cancel, keep_ms, enqueued_at, progress);
# a row without the seventh (a take for good) has no progress.
Outcome = tuple[str, bytes | None, bytes | None, Sequence[Any]]


class RecordStore:
    """The job records of one queue name, for one queue object: reading, cancelling, hearing
    of ends (``IJobRecords`` and ``IRecordSubscribable`` of the queue object, which delegates
    here), and ending the records of the jobs its settles take out of the queue, inside their
    transactions. ``keep_ms`` (0: none) is what the jobs this object adds with an id keep."""

    def __init__(
        self, db: Database, watcher: Watcher, name: str, subject: str, settings: QueueSettings
    ) -> None:
        self._db = db
        self._watcher = watcher
        self._name = name
        self._subject = subject
        #: Seconds an ended job's record is kept; 0.0: this object adds no records.
        self.keep_results = float(settings.keep_results)
        #: The ``keep_ms`` of the rows of jobs this object adds with an id (0: none).
        self.keep_ms = max(1, round(settings.keep_results * 1000)) if self.keep_results else 0
        self._limit = settings.keep_results_limit
        # The adapter clock (ms) of this object's last prune by age, and its ends since then;
        # changed only inside write transactions (one at a time).
        self._age_pruned_at: int | None = None
        self._ends_unpruned = 0

    # --- ending records, inside the caller's transaction --------------------------------------

    def end(self, conn: sqlite3.Connection, now: int, ends: Sequence[Outcome]) -> None:
        """Write the ended records of the jobs in ``ends`` that have one (``keep_ms`` set),
        numbered for the watcher, and keep the ended records within their bounds."""
        recorded = [end for end in ends if end[3][0] is not None and end[3][4] is not None]
        if not recorded:
            return
        name = self._name
        # One statement numbers the ends of this transaction: they are seq .. ended.
        count = {"queue": name, "count": len(recorded)}
        ended = int(conn.execute(_sql.ADD_ENDS, count).fetchone()[0])
        seq = ended - len(recorded) + 1
        self._ends_unpruned += len(recorded)
        if self._age_pruned_at is None or abs(now - self._age_pruned_at) >= AGE_PRUNE_EVERY_MS:
            # At most once a second: a record past its time is never read, so dropping it a
            # moment later changes no answer, and a prune with nothing to drop costs as much as
            # the record insert. The scan covers this object's ends since its last prune.
            ages = {"queue": name, "cutoff": now + 1, "scan": self._ends_unpruned + 8}
            conn.execute(_sql.PRUNE_RECORDS_BY_AGE, ages)
            self._age_pruned_at, self._ends_unpruned = now, 0
        # One list of rows per kind of end, each for its statement (see _sql.ADD_RESULT_RECORD).
        results: list[tuple[Any, ...]] = []
        plain: list[tuple[Any, ...]] = []
        errors: list[tuple[Any, ...]] = []
        progress: list[tuple[Any, ...]] = []
        for state, outcome, error, row in recorded:
            job_id, attempts, started_at, cancel, keep_ms, enqueued_at = row[:6]
            common = (name, job_id, keep_ms, enqueued_at, attempts, started_at, now, seq, cancel)
            seq += 1
            if len(row) > 6 and row[6] is not None:
                progress.append((name, job_id, row[6]))
            if state != "succeeded":
                if state == "failed" and cancel:
                    state = "cancelled"
                errors.append((*common, None if error is None else bytearray(error), state))
            elif outcome is None:
                plain.append(common)
            else:
                results.append((*common, bytearray(outcome)))
        for statement, rows in (
            (_sql.ADD_RESULT_RECORD, results),
            (_sql.ADD_SUCCEEDED_RECORD, plain),
            (_sql.ADD_ERROR_RECORD, errors),
            (_sql.SET_RECORD_PROGRESS, progress),  # after the records it sets
        ):
            if rows:
                conn.executemany(statement, rows)
        self._db.ended_records()
        upto = ended - self._limit
        if upto > 0:  # ends are numbered from 1: below the limit, nothing to drop
            conn.execute(_sql.PRUNE_RECORDS_OLDEST, {"queue": name, "upto": upto})

    def end_rows(self, conn: sqlite3.Connection, now: int, rows: Sequence[Any], state: str) -> None:
        """End the records of the jobs of ``rows`` (as _sql._SETTLED returns them) in
        ``state``."""
        self.end(conn, now, [(state, None, None, row) for row in rows])

    def sweep(self, conn: sqlite3.Connection, now: int) -> None:
        """End the jobs whose cancel was requested and whose lease ran out: cancelled (the
        queue's take does this first, so that it never hands such a job out again)."""
        params = {"queue": self._name, **self._db.times(now)}
        rows = conn.execute(_sql.SWEEP_CANCELLED, params).fetchall()
        if rows:
            self.end_rows(conn, now, rows, "cancelled")

    # --- reading ----------------------------------------------------------------------------------

    def job_record(self, job_id: str) -> StoredJobRecord | None:
        """The record of ``job_id``; ``None`` when none is kept. Answers whatever this object's
        own ``keep_results`` (records belong to the queue); works on a read-only file."""
        job_id = check_job_id(self._subject, job_id)

        def body(conn: sqlite3.Connection, now: int) -> tuple[StoredJobRecord | None, bool]:
            return self._read(conn, now, job_id)

        nothing: tuple[StoredJobRecord | None, bool] = (None, False)
        record, swept = self._db.read("job_record", body, nothing)
        if swept and not self._db.read_only:
            # Its cancel was requested and its consumer let the lease run out: end it now, so
            # that the record says when.
            self._db.write("job_record", self.sweep, None)
            record, _ = self._db.read("job_record", body, nothing)
        return record

    def _read(
        self, conn: sqlite3.Connection, now: int, job_id: str
    ) -> tuple[StoredJobRecord | None, bool]:
        """The record of ``job_id`` at ``now``, and whether it awaits a sweep (a cancelled job
        whose lease ran out)."""
        row = conn.execute(_sql.READ_RECORD, {"queue": self._name, "job_id": job_id}).fetchone()
        if row is None:
            return None, False
        _, state, enqueued_at, attempts, started_at, finished_at, expires_at, cancel = row[:8]
        result, error, _, job_state, available_at, lease_until, progress = row[8:]
        if state != "live":
            if expires_at <= now:
                return None, False  # its time is up: dropped by the next end
            times = (enqueued_at, started_at, finished_at)
            outcome = (result, error, progress)
            return _record(job_id, state, attempts, times, cancel, outcome), False
        pending = False
        finished = None
        if job_state == "ready":
            live = "queued"
        elif job_state == "delayed":
            live = "delayed" if available_at > now else "queued"
        elif lease_until > self._db.lease_clock():
            live = "running"
        elif cancel:
            live, pending, finished = "cancelled", True, now
        else:
            live = "queued"  # its lease ran out: the next take hands it out again
        times = (enqueued_at, started_at, finished)
        return _record(job_id, live, attempts, times, cancel, (None, None, progress)), pending

    # --- cancelling -------------------------------------------------------------------------------

    def cancel(self, job_id: str) -> bool:
        """Cancel ``job_id``: a queued or delayed job leaves the queue now (``"cancelled"``), a
        running one is flagged (``cancel_requested``) and its consumer hears it at its next
        renewal (``extend_lease_or_cancel``). Whether there was a job to cancel: ``False`` for
        an unknown id or an ended job."""
        job_id = check_job_id(self._subject, job_id)

        def body(conn: sqlite3.Connection, now: int) -> bool:
            self.sweep(conn, now)
            params = {"queue": self._name, "job_id": job_id}
            row = conn.execute(_sql.READ_RECORD, params).fetchone()
            if row is None or row[1] != "live":
                return False
            row_id, job_state, lease_until = row[10], row[11], row[13]
            if job_state == "leased" and lease_until > self._db.lease_clock():
                conn.execute(_sql.FLAG_CANCEL, {"id": row_id})
                return True
            rows = conn.execute(_sql.CANCEL_JOB, {"id": row_id}).fetchall()
            self.end_rows(conn, now, rows, "cancelled")
            return True

        return self._db.write("cancel", body, False)

    # --- hearing of ends --------------------------------------------------------------------------

    def subscribe(self, callback: Callable[[str], None], owner: object) -> None:
        """Call ``callback(job_id)`` on the watcher thread after a record of this queue ended,
        through any object in any process; the subscription ends with ``owner`` (the queue
        object: its ``close()``)."""

        def body(conn: sqlite3.Connection, now: int) -> int:
            row = conn.execute(_sql.ENDED_COUNT, {"queue": self._name}).fetchone()
            return int(row[0]) if row else 0

        baseline = self._db.read("subscribe_records", body, 0)
        self._watcher.subscribe_records(self._name, callback, owner, baseline)


def _blob(value: Any) -> bytes | None:
    return None if value is None else bytes(value)


def _seconds(ms: int | None) -> float | None:
    return None if ms is None else ms / 1000.0


def _record(
    job_id: str,
    state: str,
    attempts: int,
    times: tuple[int, int | None, int | None],
    cancel_requested: int,
    outcome: tuple[Any, Any, Any],
) -> StoredJobRecord:
    """A record as ``job_record`` gives it; ``times`` are enqueued, started and finished (ms),
    ``outcome`` the result, error and progress bytes (or ``None``)."""
    enqueued_at, started_at, finished_at = times
    result, error, progress = outcome
    return {
        "id": job_id,
        "state": state,
        "attempts": int(attempts),
        "result": _blob(result),
        "error": _blob(error),
        "enqueued_at": enqueued_at / 1000.0,
        "started_at": _seconds(started_at),
        "finished_at": _seconds(finished_at),
        "cancel_requested": bool(cancel_requested),
        "progress": _blob(progress),
    }
