"""sqliteq: SQLite storage for varmq, for durable jobs shared by processes on one host.

.. code-block:: python

    import sqliteq

    queues = sqliteq.new("jobs.db")
    q = queues.new_queue("emails")
    q.enqueue(b"hello")
    data, ack_id = q.dequeue_with_ack_id()
    q.acknowledge(ack_id)
    queues.close()

The queue objects match :mod:`varmq.contract.protocols` structurally; of varmq, this package
imports only :mod:`varmq.contract` (its rules, envelope, topic names and group commit).
Standard library only. See ``docs/sqliteq.md``.
"""

from __future__ import annotations

from varmq.contract.protocols import DeadLetterRecord, QueueStats
from varmq.contract.stored_settings import QueueSettingsError

from ._kinds import DistributedPriorityQueue, DistributedQueue, PriorityQueue, Queue
from ._options import QueueOptions
from ._queues import URL_SCHEMES, Queues, new, open_url
from ._topics import Topics, TopicsStorageError
from .errors import (
    ClosedError,
    CorruptDatabaseError,
    DamagedDatabaseError,
    ForeignDatabaseError,
    NotADatabaseError,
    QueueKindError,
    QueueNotFoundError,
    ReadOnlyError,
    RefusedDatabaseError,
    ReplacedDatabaseError,
    SchemaVersionError,
    SqliteqError,
    StorageUnavailableError,
)

__all__ = [
    "URL_SCHEMES",
    "ClosedError",
    "CorruptDatabaseError",
    "DamagedDatabaseError",
    "DeadLetterRecord",
    "DistributedPriorityQueue",
    "DistributedQueue",
    "ForeignDatabaseError",
    "NotADatabaseError",
    "PriorityQueue",
    "Queue",
    "QueueKindError",
    "QueueSettingsError",
    "QueueNotFoundError",
    "QueueOptions",
    "QueueStats",
    "Queues",
    "ReadOnlyError",
    "RefusedDatabaseError",
    "ReplacedDatabaseError",
    "SchemaVersionError",
    "SqliteqError",
    "StorageUnavailableError",
    "Topics",
    "TopicsStorageError",
    "new",
    "open_url",
]
