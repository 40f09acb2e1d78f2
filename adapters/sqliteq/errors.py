"""The exceptions sqliteq raises: refused files, storage trouble, wrong queue kinds.

An operation on an open queue that cannot get an answer from the file (locked by another
connection past ``busy_timeout``, disk full, I/O error, a damaged or replaced file) raises
:class:`StorageUnavailableError`, an ``OSError`` naming the file and the operation, with the
``sqlite3`` error chained; nothing it was asked to do is done. Its answers stay answers:
``[]`` from a take means "empty", ``False`` from ``acknowledge`` or ``extend_lease`` means
"not your lease any more". Bad arguments raise the plain ``TypeError`` and ``ValueError`` of
:mod:`varmq.contract.rules`; opening a file that is not ours raises a
:class:`RefusedDatabaseError`. An opener that gives a queue's stored setting another value
raises ``QueueSettingsError``, the class every storage shares
(:mod:`varmq.contract.stored_settings`, re-exported as ``sqliteq.QueueSettingsError``).
"""

from __future__ import annotations

__all__ = [
    "ClosedError",
    "CorruptDatabaseError",
    "ForeignDatabaseError",
    "NotADatabaseError",
    "QueueKindError",
    "QueueNotFoundError",
    "RefusedDatabaseError",
    "SchemaVersionError",
    "DamagedDatabaseError",
    "ReplacedDatabaseError",
    "SqliteqError",
    "StorageUnavailableError",
]


class SqliteqError(Exception):
    """Base class of every error sqliteq raises."""


class RefusedDatabaseError(SqliteqError):
    """A file sqliteq will not open; it was left exactly as it was."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"sqliteq: {path} {reason}; refusing to open it")


class NotADatabaseError(RefusedDatabaseError):
    """The file is not a SQLite database at all."""


class ForeignDatabaseError(RefusedDatabaseError):
    """The file is a SQLite database that belongs to another application."""


class SchemaVersionError(RefusedDatabaseError):
    """The file was written by a newer sqliteq, with a schema this version does not know."""


class CorruptDatabaseError(RefusedDatabaseError):
    """The file is a SQLite database that fails its integrity check or is truncated."""


class StorageUnavailableError(SqliteqError, OSError):
    """An operation on an open queue could not get an answer from the file; nothing was done.

    ``path`` is the file and ``op`` the operation (``"enqueue"``, ``"take"``, ...). The
    ``sqlite3`` error, if any, is the ``__cause__``.
    """

    def __init__(self, path: str, op: str, reason: str) -> None:
        self.path = path
        self.op = op
        self.reason = reason
        super().__init__(f"sqliteq: {op} on {path} failed: {reason}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.path, self.op, self.reason))


class DamagedDatabaseError(StorageUnavailableError):
    """The file turned out corrupt while open (SQLite reports a malformed database)."""


class ReplacedDatabaseError(StorageUnavailableError):
    """The path no longer names the file this process opened (moved, deleted or replaced).

    Adds are refused from then on, so that no job goes into a file nobody else can see;
    takes and settles still work on the file this process has open, so jobs already in it
    can be finished.
    """


class ReadOnlyError(SqliteqError):
    """A write was asked of a ``Queues`` opened with ``read_only=True``; nothing was written."""


class ClosedError(SqliteqError):
    """A queue was opened on a ``Queues`` that was already closed."""


class QueueKindError(SqliteqError, ValueError):
    """A queue name was opened as the other kind (FIFO versus priority); a ``ValueError``."""

    def __init__(self, path: str, queue: str, stored: str, requested: str) -> None:
        self.path = path
        self.queue = queue
        self.stored = stored
        self.requested = requested
        opener = "new_priority_queue" if stored == "priority" else "new_queue"
        super().__init__(
            f"sqliteq: queue {queue!r} in {path} is a {_KIND_NAMES[stored]} queue, not a "
            f"{_KIND_NAMES[requested]} queue; open it with {opener} "
            f"(or its distributed variant), or use another name"
        )


class QueueNotFoundError(SqliteqError, LookupError):
    """``open_queue`` was given a name that no queue in the file has."""

    def __init__(self, path: str, queue: str) -> None:
        self.path = path
        self.queue = queue
        super().__init__(
            f"sqliteq: no queue named {queue!r} in {path}; create it with new_queue() or "
            f"new_priority_queue() first (list_queues() shows the names)"
        )


_KIND_NAMES = {"fifo": "FIFO", "priority": "priority"}
