"""The exceptions sqliteq raises: refused files, wrong queue kinds, bad options.

Operations on an open queue never raise for storage trouble: they return their "nothing"
value (``False``, ``None``, ``[]``, ``0``) and log a warning once per condition. Exceptions
come from opening things (a file, a queue) and from bad arguments; the latter are the plain
``TypeError`` and ``ValueError`` of :mod:`sqliteq._checks`.
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
    "SqliteqError",
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
    """The file is a SQLite database that fails its integrity check."""


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
