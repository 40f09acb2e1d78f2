"""The records of the workers consuming a sqliteq file's queues: :class:`WorkerRegistry`.

``IWorkerRegistry`` of ``varmq.contract.protocols`` ("Workers seen from anywhere"), the
``worker_registry`` of every queue of one ``Queues``. One row per worker in the table
``workers``, added without a schema version like ``queue_settings`` (see
:mod:`sqliteq._schema`): made by the first registration, so a process that does not know the
table shares the file as before, and a reader that finds no table lists nobody.

Times: ``started_at`` and ``last_seen`` are wall-clock milliseconds (shown to people);
whether a worker is alive is decided on the lease clock (:mod:`sqliteq._clock`), which no one
can set: a row is alive while ``seen_at + ttl`` (lease clock ms) is ahead of the lease clock
now and its ``clock`` is the file's (``host.lease_clock``: a row written in another boot is
gone). A row gone for :data:`~varmq.contract.workers.GONE_KEPT` seconds is deleted by the next
registration. The statements are here, with the table, rather than in ``_sql``: they serve
this module only. The table is tiny (a row per worker): it needs no index but its key.
"""

from __future__ import annotations

import sqlite3

from varmq.contract.protocols import StoredWorkerRecord
from varmq.contract.rules import as_bytes
from varmq.contract.workers import GONE_KEPT

from ._database import Database

__all__ = ["CREATE_WORKERS", "WorkerRegistry"]

_KEPT_MS = round(GONE_KEPT * 1000)

CREATE_WORKERS = """
CREATE TABLE IF NOT EXISTS workers (
    id         TEXT    PRIMARY KEY NOT NULL,
    record     BLOB    NOT NULL,
    started_at INTEGER NOT NULL,
    last_seen  INTEGER NOT NULL,
    seen_at    INTEGER NOT NULL,
    ttl        INTEGER NOT NULL,
    clock      TEXT    NOT NULL
) WITHOUT ROWID"""

# sqlite_master is scanned; it is tiny.
HAS_WORKERS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'workers'"

# workers primary key; started_at stays from the first registration.
REGISTER_WORKER = """
INSERT INTO workers (id, record, started_at, last_seen, seen_at, ttl, clock)
VALUES (:id, :record, :now, :now, :lease_now, :ttl,
        COALESCE((SELECT lease_clock FROM host WHERE id = 1), 'wall'))
ON CONFLICT (id) DO UPDATE SET
    record = excluded.record, last_seen = excluded.last_seen, seen_at = excluded.seen_at,
    ttl = excluded.ttl, clock = excluded.clock"""

# Whether a row is gone for :kept ms: on the lease clock when it is the file's, else on the wall
# clock (a row of another boot).
_GONE_FOR_KEPT = """CASE
    WHEN clock = COALESCE((SELECT lease_clock FROM host WHERE id = 1), 'wall')
    THEN seen_at + ttl + :kept <= :lease_now
    ELSE last_seen + ttl + :kept <= :now
END"""

# Full scan of the (tiny) table.
PRUNE_WORKERS = f"DELETE FROM workers WHERE {_GONE_FOR_KEPT}"

# workers primary key.
REMOVE_WORKER = "DELETE FROM workers WHERE id = :id"

# Full scan of the (tiny) table.
LIST_WORKERS = (
    """
SELECT id, record, started_at, last_seen,
       clock = COALESCE((SELECT lease_clock FROM host WHERE id = 1), 'wall')
       AND seen_at + ttl > :lease_now
FROM workers WHERE NOT """
    + _GONE_FOR_KEPT
)


class WorkerRegistry:
    """The worker records of one sqliteq file (see the module's docstring)."""

    def __init__(self, db: Database) -> None:
        self._db = db
        self._subject = f"sqliteq: {db.path}"

    def register_worker(self, worker_id: str, record: bytes, expires_after: float) -> None:
        """Store or replace the record of ``worker_id``, seen now (one write transaction)."""
        data = as_bytes(f"{self._subject}: register_worker", record)
        ttl = max(round(float(expires_after) * 1000), 0)

        def body(conn: sqlite3.Connection, now: int) -> None:
            conn.execute(CREATE_WORKERS)
            times = self._db.times(now)
            conn.execute(PRUNE_WORKERS, {**times, "kept": _KEPT_MS})
            conn.execute(REGISTER_WORKER, {**times, "id": worker_id, "record": data, "ttl": ttl})

        self._db.write("register_worker", body, None)

    def remove_worker(self, worker_id: str) -> bool:
        """Delete the record of ``worker_id``; whether there was one."""

        def body(conn: sqlite3.Connection, now: int) -> bool:
            if conn.execute(HAS_WORKERS).fetchone() is None:
                return False
            return conn.execute(REMOVE_WORKER, {"id": worker_id}).rowcount > 0

        return self._db.write("remove_worker", body, False)

    def worker_records(self) -> list[StoredWorkerRecord]:
        """Every row kept; ``alive`` as the module's docstring says."""

        def body(conn: sqlite3.Connection, now: int) -> list[StoredWorkerRecord]:
            if conn.execute(HAS_WORKERS).fetchone() is None:
                return []
            times = {**self._db.times(now), "kept": _KEPT_MS}
            rows = conn.execute(LIST_WORKERS, times).fetchall()
            return [
                StoredWorkerRecord(
                    id=str(worker_id),
                    record=bytes(record),
                    started_at=started / 1000,
                    last_seen=seen / 1000,
                    alive=bool(alive),
                )
                for worker_id, record, started, seen, alive in rows
            ]

        return self._db.query(body, "workers")
