"""``Queues``: one open sqliteq file and the queues opened from it; ``new`` opens one."""

from __future__ import annotations

import math
import os
import sqlite3
import time
from typing import Any, TypeVar

from . import _sql
from ._database import Clock, Database
from ._dead import DEAD_LETTER_LIMIT, DEAD_LETTER_MAX_AGE
from ._kinds import DistributedPriorityQueue, DistributedQueue, PriorityQueue, Queue
from ._open import connect, open_database
from ._queue import StoredQueue
from ._watch import Watcher
from .errors import QueueKindError, QueueNotFoundError, SqliteqError

__all__ = ["Queues", "new"]

Q = TypeVar("Q", bound=StoredQueue)

# Retention of completed jobs when remove_on_complete=False.
DEFAULT_COMPLETED_LIMIT = 1000
DEFAULT_COMPLETED_MAX_AGE = 7 * 24 * 3600.0


def _wall_clock_ms() -> int:
    return time.time_ns() // 1_000_000


def new(
    path: str | os.PathLike[str],
    *,
    synchronous: str = "NORMAL",
    busy_timeout: float = 5.0,
    clock: Clock | None = None,
) -> Queues:
    """Open (or create) the sqliteq database at ``path``.

    ``synchronous``: ``"NORMAL"`` (default; in WAL mode a committed job survives a crash of the
    process, but the last commits may be lost on power failure or OS crash) or ``"FULL"``
    (also survives power loss, at the cost of an fsync per commit). ``busy_timeout``: seconds a
    write waits for another process's write lock. ``clock``: integer wall-clock milliseconds,
    the only source of time for stored deadlines (leases); replace it in tests.

    Raises :class:`~sqliteq.errors.RefusedDatabaseError` (and subclasses) for a file that is not
    a SQLite database, belongs to another application, is damaged, or has a newer schema; the
    file is then left unchanged.
    """
    display = os.fspath(path)
    if display in ("", ":memory:") or display.startswith("file:"):
        raise SqliteqError(
            f"sqliteq: {display!r} is not a file path; sqliteq needs a database file that "
            f"every connection (and the watcher) can open"
        )
    level = synchronous.upper() if isinstance(synchronous, str) else ""
    if level not in _sql.SYNCHRONOUS_LEVELS:
        raise ValueError(
            f"sqliteq: synchronous={synchronous!r}; expected one of "
            f"{', '.join(sorted(_sql.SYNCHRONOUS_LEVELS))}"
        )
    if not (isinstance(busy_timeout, (int, float)) and busy_timeout >= 0):
        raise ValueError(f"sqliteq: busy_timeout={busy_timeout!r}; expected seconds >= 0")
    conn = open_database(display, synchronous=level, busy_timeout=float(busy_timeout))
    try:
        read_conn = connect(display, busy_timeout=float(busy_timeout))
        read_conn.execute(_sql.SET_TEMP_STORE_MEMORY)
        read_conn.execute(_sql.SET_QUERY_ONLY)
    except BaseException:
        conn.close()
        raise
    db = Database(display, conn, read_conn, clock or _wall_clock_ms)
    return Queues(db, float(busy_timeout))


class Queues:
    """An open sqliteq database: opens named queues in it; ``close()`` closes them all."""

    def __init__(self, db: Database, busy_timeout: float) -> None:
        self._db = db
        self._watcher = Watcher(db.path, busy_timeout)

    def __repr__(self) -> str:
        state = "closed" if self._db.closed else "open"
        return f"<sqliteq.Queues {self._db.path} ({state})>"

    def __enter__(self) -> Queues:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def path(self) -> str:
        """The database file, as given to :func:`new`."""
        return self._db.path

    def new_queue(
        self,
        name: str,
        *,
        visibility_timeout: float = 300.0,
        remove_on_complete: bool = True,
        completed_limit: int = DEFAULT_COMPLETED_LIMIT,
        completed_max_age: float = DEFAULT_COMPLETED_MAX_AGE,
        dead_letter_limit: int = DEAD_LETTER_LIMIT,
        dead_letter_max_age: float = DEAD_LETTER_MAX_AGE,
    ) -> Queue:
        """Open the FIFO queue ``name`` (any text), creating it if needed.

        ``visibility_timeout``: seconds a taken job stays leased unless the lease is extended;
        then it can be taken again. ``remove_on_complete``: if ``False``, finished jobs are kept
        as done, at most ``completed_limit`` per queue and for at most ``completed_max_age``
        seconds (defaults 1000 and 7 days). ``dead_letter_limit`` and ``dead_letter_max_age``:
        dead letters kept per queue and their longest age in seconds (defaults 10,000 and 7
        days), pruned whenever this object shelves one. Raises
        :class:`~sqliteq.errors.QueueKindError` if ``name`` is a priority queue.
        """
        options = {
            "visibility_timeout": visibility_timeout,
            "remove_on_complete": remove_on_complete,
            "completed_limit": completed_limit,
            "completed_max_age": completed_max_age,
            "dead_letter_limit": dead_letter_limit,
            "dead_letter_max_age": dead_letter_max_age,
        }
        return self._open(Queue, name, "fifo", options)

    def new_priority_queue(
        self,
        name: str,
        *,
        visibility_timeout: float = 300.0,
        remove_on_complete: bool = True,
        completed_limit: int = DEFAULT_COMPLETED_LIMIT,
        completed_max_age: float = DEFAULT_COMPLETED_MAX_AGE,
        dead_letter_limit: int = DEAD_LETTER_LIMIT,
        dead_letter_max_age: float = DEAD_LETTER_MAX_AGE,
    ) -> PriorityQueue:
        """Open the priority queue ``name``; options as for :meth:`new_queue`."""
        options = {
            "visibility_timeout": visibility_timeout,
            "remove_on_complete": remove_on_complete,
            "completed_limit": completed_limit,
            "completed_max_age": completed_max_age,
            "dead_letter_limit": dead_letter_limit,
            "dead_letter_max_age": dead_letter_max_age,
        }
        return self._open(PriorityQueue, name, "priority", options)

    def new_distributed_queue(
        self,
        name: str,
        *,
        visibility_timeout: float = 300.0,
        remove_on_complete: bool = True,
        completed_limit: int = DEFAULT_COMPLETED_LIMIT,
        completed_max_age: float = DEFAULT_COMPLETED_MAX_AGE,
        dead_letter_limit: int = DEAD_LETTER_LIMIT,
        dead_letter_max_age: float = DEAD_LETTER_MAX_AGE,
    ) -> DistributedQueue:
        """Open the FIFO queue ``name`` with ``subscribe``; options as for :meth:`new_queue`."""
        options = {
            "visibility_timeout": visibility_timeout,
            "remove_on_complete": remove_on_complete,
            "completed_limit": completed_limit,
            "completed_max_age": completed_max_age,
            "dead_letter_limit": dead_letter_limit,
            "dead_letter_max_age": dead_letter_max_age,
        }
        return self._open(DistributedQueue, name, "fifo", options)

    def new_distributed_priority_queue(
        self,
        name: str,
        *,
        visibility_timeout: float = 300.0,
        remove_on_complete: bool = True,
        completed_limit: int = DEFAULT_COMPLETED_LIMIT,
        completed_max_age: float = DEFAULT_COMPLETED_MAX_AGE,
        dead_letter_limit: int = DEAD_LETTER_LIMIT,
        dead_letter_max_age: float = DEAD_LETTER_MAX_AGE,
    ) -> DistributedPriorityQueue:
        """Open the priority queue ``name`` with ``subscribe``; as for :meth:`new_queue`."""
        options = {
            "visibility_timeout": visibility_timeout,
            "remove_on_complete": remove_on_complete,
            "completed_limit": completed_limit,
            "completed_max_age": completed_max_age,
            "dead_letter_limit": dead_letter_limit,
            "dead_letter_max_age": dead_letter_max_age,
        }
        return self._open(DistributedPriorityQueue, name, "priority", options)

    def list_queues(self) -> list[tuple[str, str]]:
        """``(name, kind)`` of every queue ever created in the file, by name.

        ``kind`` is ``"fifo"`` or ``"priority"``. Raises ``sqlite3.Error`` if the file cannot
        be read and :class:`~sqliteq.errors.ClosedError` once closed.
        """

        def body(conn: sqlite3.Connection, now: int) -> list[tuple[str, str]]:
            return [(str(name), str(kind)) for name, kind in conn.execute(_sql.LIST_QUEUES)]

        return self._db.query(body)

    def open_queue(self, name: str, **options: Any) -> DistributedQueue | DistributedPriorityQueue:
        """Open the existing queue ``name`` as its own kind, distributed (with ``subscribe``).

        ``options`` are those of :meth:`new_queue`. Raises
        :class:`~sqliteq.errors.QueueNotFoundError` (a ``LookupError``) naming the queue when
        the file has no queue of that name.
        """
        if not isinstance(name, str):
            raise TypeError(f"sqliteq: a queue name must be a str, not {type(name).__name__}")

        def body(conn: sqlite3.Connection, now: int) -> str | None:
            row = conn.execute(_sql.QUEUE_KIND, {"queue": name}).fetchone()
            return None if row is None else str(row[0])

        kind = self._db.query(body)
        if kind is None:
            raise QueueNotFoundError(self._db.path, name)
        if kind == "priority":
            return self.new_distributed_priority_queue(name, **options)
        return self.new_distributed_queue(name, **options)

    def close(self) -> None:
        """Stop the watcher thread and close the file. Idempotent."""
        self._watcher.close()
        self._db.close()

    def _open(self, cls: type[Q], name: str, kind: str, options: dict[str, Any]) -> Q:
        if not isinstance(name, str):
            raise TypeError(f"sqliteq: a queue name must be a str, not {type(name).__name__}")
        settings = _checked(name, options)

        def body(conn: sqlite3.Connection, now: int) -> str:
            conn.execute(_sql.REGISTER_QUEUE, {"queue": name, "kind": kind})
            return str(conn.execute(_sql.QUEUE_KIND, {"queue": name}).fetchone()[0])

        try:
            stored = self._db.transaction(body)
        except sqlite3.Error as exc:
            raise SqliteqError(
                f"sqliteq: cannot open queue {name!r} in {self._db.path}: {exc}"
            ) from exc
        if stored != kind:
            raise QueueKindError(self._db.path, name, stored, kind)
        return cls(self._db, name, watcher=self._watcher, **settings)


def _checked(name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """Check the options of a ``new_*queue`` call; raise ValueError naming the queue."""
    for key in ("visibility_timeout", "completed_max_age"):
        value = settings[key]
        if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"sqliteq: queue {name!r}: {key}={value!r}; expected seconds > 0")
    limit = settings["completed_limit"]
    if not isinstance(limit, int) or limit < 0:
        raise ValueError(f"sqliteq: queue {name!r}: completed_limit={limit!r}; expected int >= 0")
    dead_limit = settings["dead_letter_limit"]
    if isinstance(dead_limit, bool) or not isinstance(dead_limit, int) or dead_limit < 1:
        raise ValueError(
            f"sqliteq: queue {name!r}: dead_letter_limit={dead_limit!r}; expected int >= 1"
        )
    dead_age = settings["dead_letter_max_age"]
    if not isinstance(dead_age, (int, float)) or not math.isfinite(dead_age) or dead_age <= 0:
        raise ValueError(
            f"sqliteq: queue {name!r}: dead_letter_max_age={dead_age!r}; expected seconds > 0"
        )
    return {**settings, "remove_on_complete": bool(settings["remove_on_complete"])}
