"""``Queues``: one open sqliteq file and the queues opened from it; ``new`` opens one."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from varmq.contract.protocols import DEFAULT_TOPIC_DEDUP_TTL
from varmq.contract.rules import check_name
from varmq.contract.stored_settings import encode
from varmq.contract.workers import WorkerInfo, worker_infos

from . import _schema, _sql
from ._clock import Clock, host_lease_clock, wall_clock_ms
from ._database import Database
from ._dead import DeadLetterShelf
from ._kinds import DistributedPriorityQueue, DistributedQueue, PriorityQueue, Queue
from ._open import connect, open_database, open_read_only, read_only_query
from ._options import DEFINING, QueueOptions, queue_settings, settle
from ._queue import StoredQueue, subject_of
from ._records import RecordStore
from ._topics import Topics
from ._watch import Watcher
from ._workers import WorkerRegistry
from ._writer import Writer
from .errors import QueueKindError, QueueNotFoundError, SqliteqError

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = ["URL_SCHEMES", "Queues", "new", "open_url"]

URL_SCHEMES = ("sqlite",)
"""The URL schemes :func:`open_url` takes (besides plain paths)."""

Q = TypeVar("Q", bound=StoredQueue)


DEFAULT_BUSY_TIMEOUT = 3.0
"""Seconds a call waits, in all, for another connection's write lock before it raises."""

MAX_BUSY_TIMEOUT = 600.0
"""The longest ``busy_timeout`` accepted (seconds)."""


def new(
    path: str | os.PathLike[str],
    *,
    durable: bool = False,
    synchronous: str | None = None,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    clock: Clock | None = None,
    create: bool = True,
    read_only: bool = False,
) -> Queues:
    """Open (or create) the sqliteq database at ``path``.

    ``durable``: ``False`` (default) commits with ``synchronous=NORMAL``: in WAL mode a
    committed job survives a crash of the process, but the last commits may be lost on power
    failure or an OS crash. ``True`` commits with ``synchronous=FULL``: a committed job also
    survives power loss, at the cost of an fsync per commit. ``synchronous`` sets the SQLite
    level directly instead (``OFF``, ``NORMAL``, ``FULL``, ``EXTRA``); do not give both.
    ``busy_timeout``: seconds a call waits in all for another connection's write lock before
    it raises :class:`~sqliteq.errors.StorageUnavailableError` (default 3, at most 600).
    ``clock``: integer milliseconds, the only source of time for stored times and deadlines,
    leases included; replace it in tests. By default due times are wall-clock and leases are
    on the host's boot-time clock, tagged with its boot id (see ``docs/sqliteq.md``).
    ``create``: set up a missing or empty file as a new database (the default); with
    ``False``, a missing file raises ``FileNotFoundError`` and an empty one, or a SQLite
    database without tables, :class:`~sqliteq.errors.NotADatabaseError`.
    ``read_only``: look without writing anything (needs ``create=False``): the file is read
    with a ``mode=ro`` URI, no ``-wal``/``-shm`` files are made, no schema step runs (a file at
    another schema version raises :class:`~sqliteq.errors.SchemaVersionError` naming both),
    queues are opened only if they exist, and writes raise
    :class:`~sqliteq.errors.ReadOnlyError`.

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
    level = _synchronous_level(display, durable, synchronous)
    timeout = check_busy_timeout(display, busy_timeout)
    if not isinstance(read_only, bool):
        raise TypeError(f"sqliteq: {display}: read_only={read_only!r}; expected True or False")
    if read_only:
        if create:
            raise ValueError(f"sqliteq: {display}: read_only=True needs create=False")
        lease = clock or host_lease_clock()[1]
        query = read_only_query(display)
        reader = open_read_only(display, busy_timeout=timeout, uri_query=query)
        db = Database(
            display,
            None,
            reader,
            clock or wall_clock_ms,
            timeout,
            lease_clock=lease,
            read_query=query,
        )
        return Queues(db, timeout)
    wall = clock or wall_clock_ms
    adopt = None
    if clock is None:
        identity, lease = host_lease_clock()
        adopt = (identity, lease, wall)
    else:
        lease = clock
    conn = open_database(
        display, synchronous=level, busy_timeout=timeout, create=bool(create), lease_clock=adopt
    )
    try:
        read_conn = connect(display, busy_timeout=timeout)
        read_conn.execute(_sql.SET_TEMP_STORE_MEMORY)
        read_conn.execute(_sql.SET_QUERY_ONLY)
    except BaseException:
        conn.close()
        raise
    db = Database(display, conn, read_conn, wall, timeout, lease_clock=lease)
    return Queues(db, timeout)


def _synchronous_level(path: str, durable: object, synchronous: object) -> str:
    if not isinstance(durable, bool):
        raise TypeError(f"sqliteq: {path}: durable={durable!r}; expected True or False")
    if synchronous is None:
        return "FULL" if durable else "NORMAL"
    if durable:
        raise ValueError(
            f"sqliteq: {path}: give durable=True or synchronous={synchronous!r}, not both"
        )
    level = synchronous.upper() if isinstance(synchronous, str) else ""
    if level not in _sql.SYNCHRONOUS_LEVELS:
        raise ValueError(
            f"sqliteq: synchronous={synchronous!r}; expected one of "
            f"{', '.join(sorted(_sql.SYNCHRONOUS_LEVELS))}"
        )
    return level


def check_busy_timeout(path: str, busy_timeout: object) -> float:
    """``busy_timeout`` as seconds: a finite int or float from 0 to MAX_BUSY_TIMEOUT."""
    if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, (int, float)):
        raise TypeError(
            f"sqliteq: {path}: busy_timeout={busy_timeout!r}; expected seconds (int or float)"
        )
    if not (0 <= busy_timeout <= MAX_BUSY_TIMEOUT):  # also refuses NaN
        raise ValueError(
            f"sqliteq: {path}: busy_timeout={busy_timeout!r}; expected seconds from 0 to "
            f"{MAX_BUSY_TIMEOUT:g}"
        )
    return float(busy_timeout)


def open_url(url: str, *, create: bool = False, read_only: bool = False) -> Queues:
    """Open the sqliteq database that ``url`` names, for operator tools.

    ``url`` is a plain path or ``sqlite:relative/path``, ``sqlite://relative/path`` or
    ``sqlite:///absolute/path``. Unlike :func:`new`, nothing is created unless ``create`` is
    true: a missing file raises ``FileNotFoundError`` naming it, and an empty file or a SQLite
    database without tables raises :class:`~sqliteq.errors.NotADatabaseError`, leaving it as
    it was. ``read_only=True`` opens it as :func:`new` does with ``read_only=True``: nothing
    is written, not even ``-wal``/``-shm`` files. Other refusals are those of :func:`new`.
    """
    return new(_path_of(url), create=create, read_only=read_only)


def _path_of(url: str) -> str:
    """The file path in a ``sqlite:`` URL, or the plain path given."""
    scheme, colon, rest = url.partition(":")
    if colon and scheme in URL_SCHEMES:
        return rest[2:] if rest.startswith("//") else rest  # sqlite:///abs, sqlite://rel
    if "://" in url:
        raise ValueError(
            f"sqliteq: cannot open {url!r}: give a file path or a sqlite: URL "
            "(sqlite:relative/path, sqlite:///absolute/path)"
        )
    return url


class Queues:
    """An open sqliteq database: opens named queues in it; ``close()`` closes them all."""

    def __init__(self, db: Database, busy_timeout: float) -> None:
        self._db = db
        self._writer = Writer(db)  # the adds: group commit, and the thread for coroutines
        self._workers = WorkerRegistry(db)  # the records of the workers of every process
        query = read_only_query(db.path) if db.read_only else ""
        self._watcher = Watcher(
            db.path, busy_timeout, uri_query=query, on_tick=db.check_file, bell=not db.read_only
        )

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

    @property
    def location(self) -> str:
        """Where the queues are, for messages: the database file, as given to :func:`new`."""
        return self._db.path

    def new_queue(self, name: str, **options: Unpack[QueueOptions]) -> Queue:
        """Open the FIFO queue ``name``, creating it if needed; ``options``: :class:`QueueOptions`.

        Raises :class:`~sqliteq.errors.QueueKindError` if ``name`` is a priority queue.
        """
        return self._open(Queue, name, options)

    def new_priority_queue(self, name: str, **options: Unpack[QueueOptions]) -> PriorityQueue:
        """Open the priority queue ``name``; options as for :meth:`new_queue`."""
        return self._open(PriorityQueue, name, options)

    def new_distributed_queue(self, name: str, **options: Unpack[QueueOptions]) -> DistributedQueue:
        """Open the FIFO queue ``name`` with ``subscribe``; options as for :meth:`new_queue`."""
        return self._open(DistributedQueue, name, options)

    def new_distributed_priority_queue(
        self, name: str, **options: Unpack[QueueOptions]
    ) -> DistributedPriorityQueue:
        """Open the priority queue ``name`` with ``subscribe``; as for :meth:`new_queue`."""
        return self._open(DistributedPriorityQueue, name, options)

    def list_queues(self) -> list[tuple[str, str]]:
        """``(name, kind)`` of every queue ever created in the file, by name.

        ``kind`` is ``"fifo"`` or ``"priority"``. Raises
        :class:`~sqliteq.errors.StorageUnavailableError` if the file cannot be read and
        :class:`~sqliteq.errors.ClosedError` once closed.
        """

        def body(conn: sqlite3.Connection, now: int) -> list[tuple[str, str]]:
            return [(str(name), str(kind)) for name, kind in conn.execute(_sql.LIST_QUEUES)]

        return self._db.query(body, "list_queues")

    def open_queue(
        self, name: str, **options: Unpack[QueueOptions]
    ) -> DistributedQueue | DistributedPriorityQueue:
        """Open the existing queue ``name`` as its own kind, distributed (with ``subscribe``).

        ``options`` are those of :meth:`new_queue`. Raises
        :class:`~sqliteq.errors.QueueNotFoundError` (a ``LookupError``) naming the queue when
        the file has no queue of that name.
        """
        check_name(f"sqliteq: {self._db.path}", name)

        kind = self._stored_kind(name)
        if kind is None:
            raise QueueNotFoundError(self._db.path, name)
        if kind == "priority":
            return self._open(DistributedPriorityQueue, name, options, offer=False)
        return self._open(DistributedQueue, name, options, offer=False)

    def topics(self, *, dedup_ttl: float = DEFAULT_TOPIC_DEDUP_TTL) -> Topics:
        """The topic bindings of this file and publishing into bound queues (see
        :class:`~sqliteq._topics.Topics`); every process using the file shares them.

        ``dedup_ttl``: seconds a ``message_id`` this object publishes is kept in the file, so
        that a publish of it again within that time, by any process, stores nothing (default
        one day; 0: only while its copies are stored)."""
        return Topics(self._db, dedup_ttl)

    def workers(self) -> list[WorkerInfo]:
        """Every worker, of any process, consuming a queue of this file: living ones first,
        then those gone (killed, or cut off) for less than an hour, with ``alive=False``.

        Raises :class:`~sqliteq.errors.StorageUnavailableError` if the file cannot be read and
        :class:`~sqliteq.errors.ClosedError` once closed.
        """
        return worker_infos(self._workers.worker_records())

    def close(self) -> None:
        """Store the adds already handed to the writer thread, stop the threads and close the
        file. Idempotent."""
        self._writer.close()
        self._watcher.close()
        self._db.close()

    def _open(
        self, cls: type[Q], name: str, options: Mapping[str, Any], *, offer: bool = True
    ) -> Q:
        """The one opener: check the name and options, record the queue's kind and (when it
        offers them and none are stored yet) its defining settings, open it."""
        check_name(f"sqliteq: {self._db.path}", name)
        subject = subject_of(self._db, name)
        offered = queue_settings(subject, options)
        kind = "priority" if issubclass(cls, PriorityQueue) else "fifo"
        if self._db.read_only:
            stored, text = self._stored_kind(name), self._stored_settings(name)
        else:
            stored, text = self._register(name, kind, encode(offered, DEFINING) if offer else None)
        if stored is None:  # a read-only file opens only the queues it has
            raise QueueNotFoundError(self._db.path, name)
        if stored != kind:
            raise QueueKindError(self._db.path, name, stored, kind)
        settings = settle(subject, options, offered, text)
        db, watcher = self._db, self._watcher
        records = RecordStore(db, watcher, name, subject, settings)
        dead = DeadLetterShelf(db, name, subject, settings, records)
        queue = cls(
            db, name, settings, watcher=watcher, writer=self._writer, records=records, dead=dead
        )
        queue.worker_registry = self._workers
        return queue

    def _register(self, name: str, kind: str, offer: str | None) -> tuple[str, str | None]:
        """Record that ``name`` is a queue of ``kind`` unless it is one already, and store the
        settings offered unless some are stored already: its kind and stored settings."""

        def body(conn: sqlite3.Connection, now: int) -> tuple[str, str | None]:
            conn.execute(_sql.REGISTER_QUEUE, {"queue": name, "kind": kind})
            stored = str(conn.execute(_sql.QUEUE_KIND, {"queue": name}).fetchone()[0])
            if offer is not None and stored == kind:
                conn.execute(_schema.CREATE_QUEUE_SETTINGS)
                conn.execute(_sql.OFFER_QUEUE_SETTINGS, {"queue": name, "settings": offer})
            return stored, _read_settings(conn, name)

        return self._db.transaction(body, "open_queue")

    def _stored_settings(self, name: str) -> str | None:
        """The settings stored with the queue ``name``, without writing; ``None``: none."""
        return self._db.query(lambda conn, now: _read_settings(conn, name), "open_queue")

    def _stored_kind(self, name: str) -> str | None:
        """The kind of the queue ``name`` in the file, without writing; ``None``: no such."""

        def body(conn: sqlite3.Connection, now: int) -> str | None:
            row = conn.execute(_sql.QUEUE_KIND, {"queue": name}).fetchone()
            return None if row is None else str(row[0])

        return self._db.query(body, "open_queue")


def _read_settings(conn: sqlite3.Connection, name: str) -> str | None:
    """The settings stored with the queue ``name`` (``None``: none, or no table yet)."""
    if conn.execute(_sql.HAS_QUEUE_SETTINGS).fetchone() is None:
        return None
    row = conn.execute(_sql.QUEUE_SETTINGS, {"queue": name}).fetchone()
    return None if row is None else str(row[0])
