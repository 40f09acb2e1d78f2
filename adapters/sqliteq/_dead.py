"""The dead-letter shelf of a queue: shelving a leased job, listing, requeueing, purging.

:class:`DeadLetterShelf` is the shelf a queue object is made with (``IDeadLetterable`` of the
queue object, which delegates here): each method is one transaction of statements from
:mod:`sqliteq._sql` (a read for listing). Dead letters live in their own table, so they
never slow down a take and never hold a job id. Retention is bounded by count and age, pruned
in the transaction that adds a dead letter; the count is kept in ``queues.dead``, so pruning
costs O(letters dropped), not O(letters kept).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from varmq.contract.protocols import DeadLetterRecord
from varmq.contract.rules import check, check_keys, error_text

from . import _sql
from ._database import Database
from ._options import QueueSettings
from ._records import RecordStore
from ._retention import DEAD, keep_within

__all__ = ["DeadLetterShelf"]


class DeadLetterShelf:
    """``IDeadLetterable`` over the ``dead_letters`` table, for one queue name; ``records``
    ends the record of a job it shelves."""

    def __init__(
        self,
        db: Database,
        name: str,
        subject: str,
        settings: QueueSettings,
        records: RecordStore,
    ) -> None:
        self._db = db
        self._name = name
        self._subject = subject
        self._records = records
        self._limit = settings.dead_letter_limit
        self._max_age_ms = round(settings.dead_letter_max_age * 1000)

    def bury(self, ack_id: Any, error: str, detail: bytes | None) -> bool:
        """Move the job leased under ``ack_id`` to the dead letters, recording ``error``, and
        ``detail`` (or nothing) as the error of its ``"dead"`` record.

        Fenced like ``acknowledge``: ``False`` when the lease is unknown, expired or taken
        over. In the same transaction, drops the queue's dead letters older than this object's
        ``dead_letter_max_age`` and the oldest beyond its ``dead_letter_limit``. A job whose
        cancel was requested ends ``"cancelled"`` instead of being shelved.
        """
        if not isinstance(ack_id, str):
            return False
        text = error_text(error)

        def body(conn: sqlite3.Connection, now: int) -> bool:
            params = {"token": ack_id, "queue": self._name, **self._db.times(now)}
            row = conn.execute(_sql.DEAD_LETTER, params).fetchone()
            if row is None:
                cancelled = conn.execute(_sql.SETTLE_CANCELLED, params).fetchall()
                self._records.end_rows(conn, now, cancelled, "cancelled")
                return bool(cancelled)
            priority, data, job_id, attempts, started_at, keep_ms, enqueued_at, progress = row
            letter = {"priority": priority, "data": data, "job_id": job_id, "attempts": attempts}
            conn.execute(_sql.ADD_DEAD_LETTER, {**params, **letter, "error": text})
            self._prune_dead(conn, now)
            settled = (job_id, attempts, started_at, 0, keep_ms, enqueued_at, progress)
            self._records.end(conn, now, [("dead", None, detail, settled)])
            return True

        return self._db.write("dead_letter", body, False)

    def _prune_dead(self, conn: sqlite3.Connection, now: int) -> None:
        """Count the letter just added and drop those beyond the retention bounds."""
        cutoff = now - self._max_age_ms
        keep_within(conn, DEAD, self._name, 1, cutoff=cutoff, limit=self._limit)

    def letters(self, limit: int) -> list[DeadLetterRecord]:
        """Up to ``limit`` dead letters of this queue, oldest first.

        ``key`` names one for :meth:`requeue_dead`; ``dead_at`` is in Unix seconds (the
        adapter clock).
        """
        check(self._subject, "limit", limit)

        def body(conn: sqlite3.Connection, now: int) -> list[DeadLetterRecord]:
            rows = conn.execute(_sql.LIST_DEAD, {"queue": self._name, "limit": limit})
            return [
                {
                    "key": str(key),
                    "item": bytes(data),
                    "attempts": int(attempts),
                    "error": str(error),
                    "dead_at": dead_at / 1000.0,
                }
                for key, data, attempts, error, dead_at in rows
            ]

        return self._db.read("dead_letters", body, [])

    def requeue(self, keys: Sequence[str] | None) -> int:
        """Put the dead letters ``keys`` (all when ``None``) back in line; how many.

        Each becomes a new job at the end of its priority's line, available now, with its
        delivery count reset (the next take is attempt 1) and its job id back unless another
        stored job holds it meanwhile. Unknown keys, and keys of other queues, are ignored.
        Given keys are requeued in the order given; all of them, oldest first.
        """
        chosen = check_keys(self._subject, keys)
        wanted = None if chosen is None else list(dict.fromkeys(_key_ids(chosen)))

        def body(conn: sqlite3.Connection, now: int) -> int:
            queue = {"queue": self._name}
            if wanted is None:
                rows = conn.execute(_sql.DELETE_DEAD_ALL, queue).fetchall()
                rows.sort(key=lambda row: (row[1], row[0]))  # oldest first
            else:
                rows = []
                for key in wanted:
                    row = conn.execute(_sql.DELETE_DEAD, {**queue, "key": key}).fetchone()
                    if row is not None:
                        rows.append(row)
            for _, _, priority, data, job_id in rows:
                keep_ms = None
                if job_id is not None:
                    job_id, keep_ms = self._requeued_id(conn, now, str(job_id))
                job = {
                    "priority": priority,
                    "data": data,
                    "job_id": job_id,
                    "keep_ms": keep_ms,
                    **self._db.times(now),
                }
                conn.execute(_sql.REQUEUE_DEAD, {**queue, **job})
            if rows:
                conn.execute(_sql.ADD_DEAD, {**queue, "delta": -len(rows)})
                conn.execute(_sql.BUMP_ENQUEUED, queue)
            return len(rows)

        return self._db.write("requeue_dead", body, 0)

    def _requeued_id(
        self, conn: sqlite3.Connection, now: int, job_id: str
    ) -> tuple[str | None, int | None]:
        """The job id a requeued dead letter gets back, and the ``keep_ms`` of its record: its
        own kept ``dead`` record becomes its row again; a stored job, or the kept record of
        another job, holding the id means it comes back without one; with no record kept, it
        gets one if this object keeps records."""
        params = {"queue": self._name, "job_id": job_id, "now": now}
        row = conn.execute(_sql.TAKE_DEAD_RECORD, params).fetchone()
        if row is not None:
            return job_id, int(row[0])
        if conn.execute(_sql.JOB_ID_STORED, params).fetchone()[0]:
            return None, None
        return job_id, (self._records.keep_ms or None)

    def purge(self) -> int:
        """Delete every dead letter of this queue; how many."""

        def body(conn: sqlite3.Connection, now: int) -> int:
            queue = {"queue": self._name}
            count = len(conn.execute(_sql.DELETE_DEAD_ALL, queue).fetchall())
            if count:
                conn.execute(_sql.ADD_DEAD, {**queue, "delta": -count})
            return count

        return self._db.write("purge_dead", body, 0)


def _key_ids(keys: Sequence[str]) -> list[int]:
    """The row ids that ``keys`` name; anything that is not a key of ours is left out."""
    ids = []
    for key in keys:
        if key.isascii() and key.isdigit() and len(key) < 19:
            ids.append(int(key))  # under 19 digits: within SQLite's 64-bit integers
    return ids
