"""``Queues.topics()``: topic bindings stored in the file, and publishing into bound queues.

What a ``Topics`` object offers is ``IStorageTopics`` of ``varmq.contract.protocols`` ("Topics"): a
binding ``(pattern, queue)`` is a row of ``topic_bindings`` (schema version 5), so every
process using the file honours every binding, whoever made it. ``publish`` reads the bindings
and stores one copy per matching queue in one write transaction (every copy or none); each
stored copy bumps its queue's ``enqueued`` counter, which is how any add is announced to
subscribers in every process (the watcher thread). A copy with a job id (a publish with a
``message_id``) is stored as ``enqueue_dedup`` stores a job: not again while a copy with that
id is stored. The ``message_id`` itself is kept in ``topic_message_ids`` for the ``dedup_ttl``
of the publishing object (default one day), in the same transaction: a publish of a kept id
stores nothing, whoever consumed the first copies. Capacities limit the queue objects' own
enqueues, not copies.

Live subscribers (``ILiveTopics``) are not offered: SQLite has no way to push a publish to
another process; bind a queue instead.

Unlike queue operations, which return their "nothing" value when the file fails, every call
here raises :class:`TopicsStorageError` (an ``OSError`` naming the file) for storage trouble.
"""

from __future__ import annotations

import itertools
import math
import sqlite3
import threading
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from varmq.contract import envelope, observe
from varmq.contract.protocols import DEFAULT_TOPIC_DEDUP_TTL
from varmq.contract.rules import check
from varmq.contract.rules import check_name as check_queue_name
from varmq.contract.topic_names import PatternTrie, check_name, check_pattern, copy_id

from . import _schema, _sql
from ._database import Database
from .errors import StorageUnavailableError

__all__ = ["Topics", "TopicsStorageError"]

T = TypeVar("T")

# Names whose queues are kept per version of the bindings; more are matched on every publish.
_ROUTES_KEPT = 10_000


class TopicsStorageError(StorageUnavailableError):
    """A topics call could not read or write the file; the message names the file.

    A :class:`~sqliteq.StorageUnavailableError` (``path``, ``op``), as the queues raise, so one
    ``except`` covers both; the write-lock wait past ``busy_timeout`` raises that one itself."""


class Topics:
    """The topic bindings of one sqliteq file (``queues.topics()``): ``IStorageTopics``."""

    def __init__(self, db: Database, dedup_ttl: float = DEFAULT_TOPIC_DEDUP_TTL) -> None:
        self._db = db
        self._subject = f"sqliteq: {db.path}: topics"
        self._dedup_ttl_ms = math.ceil(check(self._subject, "dedup_ttl", dedup_ttl) * 1000)
        # Whether this object saw topic_message_ids committed (a table is never dropped).
        # Guarded by the database's write lock.
        self._message_ids_made = False
        # The bindings last read and the trie built from them: rebuilt only when they changed.
        self._lock = threading.Lock()  # guards _seen, _trie and _routes
        self._seen: list[tuple[str, str]] | None = None
        self._trie: PatternTrie[str] = PatternTrie()
        # name -> its queues (and BUMP_ENQUEUED's parameters for them), by _seen
        self._routes: dict[str, tuple[list[str], list[dict[str, str]]]] = {}
        # Queues whose row in ``queues`` this object saw committed (rows are never deleted),
        # so a copy into one needs no REGISTER_QUEUE. Guarded by the database's write lock.
        self._registered: set[str] = set()
        # Job ids of copies without a message id: a random prefix of this object and a count.
        self._id_prefix = uuid.uuid4().hex[:16]
        self._id_count = itertools.count()

    def __repr__(self) -> str:
        return f"<sqliteq.Topics of {self._db.path}>"

    # -- bindings ------------------------------------------------------------------------

    def bind(self, pattern: str, queue: str) -> bool:
        """Route every publish matching ``pattern`` into the queue named ``queue`` (made a
        FIFO queue by the first copy if it was never opened), for every process using the
        file; whether the binding is new."""
        return self._change(_sql.BIND_TOPIC, pattern, queue, f"bind {pattern!r} to queue")

    def unbind(self, pattern: str, queue: str) -> bool:
        """Remove the binding of ``queue`` under ``pattern``; whether there was one."""
        return self._change(_sql.UNBIND_TOPIC, pattern, queue, f"unbind {pattern!r} from queue")

    def _change(self, statement: str, pattern: str, queue: str, what: str) -> bool:
        """Add or remove the binding ``(pattern, queue)`` with ``statement``; whether it did."""
        check_pattern(pattern)
        check_queue_name(self._subject, queue)
        params = {"pattern": pattern, "queue": queue}

        def body(conn: sqlite3.Connection, now: int) -> bool:
            return conn.execute(statement, params).rowcount == 1

        return self._write(f"{what} {queue!r}", body)

    def bindings(self) -> list[tuple[str, str]]:
        """Every binding in the file as ``(pattern, queue)``, sorted by pattern, then queue."""

        def body(conn: sqlite3.Connection, now: int) -> list[tuple[str, str]]:
            return _rows(conn)

        try:
            return sorted(self._db.query(body))
        except sqlite3.Error as exc:
            raise TopicsStorageError(self._db.path, "read the topic bindings", str(exc)) from exc

    # -- publishing ----------------------------------------------------------------------

    def publish(self, name: str, data: Any, *, message_id: str | None = None) -> int:
        """Store a copy of ``data`` in every bound queue whose pattern matches ``name``, in
        one transaction with reading the bindings; how many copies were stored (0 for a
        publish retried with the same ``message_id`` while its copies are stored)."""
        return observe.observed_publish(
            name, message_id, lambda trace: self._publish(name, data, message_id, trace)
        )

    def _publish(
        self, name: str, data: Any, message_id: str | None, trace: dict[str, str] | None
    ) -> int:
        """:meth:`publish`, storing ``trace`` with each copy."""
        words = check_name(name)
        if message_id is not None and (not isinstance(message_id, str) or not message_id):
            raise TypeError(
                f"{self._subject}: message_id must be a non-empty str, got {message_id!r} "
                f"({type(message_id).__name__})"
            )
        copies = _copies(self._subject, name, data, trace)
        registered = self._registered
        added: list[str] = []
        keep_ms = self._dedup_ttl_ms if message_id else 0

        def body(conn: sqlite3.Connection, now: int) -> int:
            added.clear()
            if keep_ms:
                if not self._message_ids_made:
                    conn.execute(_schema.CREATE_TOPIC_MESSAGE_IDS)
                    conn.execute(_schema.CREATE_TOPIC_MESSAGE_IDS_EXPIRY)
                conn.execute(_sql.PRUNE_MESSAGE_IDS, {"now": now})
                kept = {"message_id": message_id, "now": now, "until": now + keep_ms}
                if conn.execute(_sql.MESSAGE_ID_KEPT, kept).fetchone() is not None:
                    return 0  # published within the window: nothing stored
                conn.execute(_sql.KEEP_MESSAGE_ID, kept)
            queues, bumps = self._matching(_rows(conn), name, words)
            if not queues:
                return 0
            new = [queue for queue in queues if queue not in registered]
            if new:
                conn.executemany(_sql.REGISTER_QUEUE, [{"queue": q, "kind": "fifo"} for q in new])
                added.extend(new)
            if message_id:
                # One statement per copy: its row count says whether the copy was a dedup hit.
                stored_in = []
                for queue in queues:
                    job_id = copy_id(message_id, queue)
                    params = _copy(queue, copies.of(job_id), now)
                    params["job_id"] = job_id
                    params["keep_ms"] = None  # a copy has no record
                    if conn.execute(_sql.ENQUEUE_DEDUP, params).rowcount == 1:
                        stored_in.append(queue)
            else:
                prefix, count = self._id_prefix, self._id_count
                fresh = [_copy(q, copies.of(f"{prefix}{next(count):016x}"), now) for q in queues]
                conn.executemany(_sql.ENQUEUE, fresh)
                stored_in = queues
            if stored_in is not queues:
                bumps = [{"queue": queue} for queue in stored_in]
            conn.executemany(_sql.BUMP_ENQUEUED, bumps)
            return len(stored_in)

        stored = self._write(f"publish {name!r}", body, "publish")
        registered.update(added)  # committed
        self._message_ids_made = self._message_ids_made or bool(keep_ms)
        return stored

    def _matching(
        self, rows: list[tuple[str, str]], name: str, words: tuple[str, ...]
    ) -> tuple[list[str], list[dict[str, str]]]:
        """The queues (sorted, and as the parameters of BUMP_ENQUEUED) of the bindings ``rows``
        whose pattern matches ``words``: worked out once per name while the bindings read in
        the transaction stay the same."""
        with self._lock:
            if rows != self._seen:
                trie: PatternTrie[str] = PatternTrie()
                for pattern, queue in rows:
                    trie.add(check_pattern(pattern), queue)
                self._seen, self._trie, self._routes = rows, trie, {}
            route = self._routes.get(name)
            if route is None:
                queues = sorted(set(self._trie.match(words)))
                route = (queues, [{"queue": queue} for queue in queues])
                if len(self._routes) < _ROUTES_KEPT:
                    self._routes[name] = route
            return route

    def _write(
        self, what: str, body: Callable[[sqlite3.Connection, int], T], op: str = "write"
    ) -> T:
        try:
            return self._db.transaction(body, op)
        except sqlite3.Error as exc:
            raise TopicsStorageError(self._db.path, what, str(exc)) from exc


def _copy(queue: str, envelope: bytes, now: int) -> dict[str, Any]:
    """The parameters of ENQUEUE for one copy, stored as ``envelope``."""
    return {"queue": queue, "priority": 0, "data": envelope, "now": now}


def _rows(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    return [(str(p), str(q)) for p, q in conn.execute(_sql.TOPIC_BINDINGS)]


def _copies(subject: str, name: str, data: Any, trace: dict[str, str] | None) -> envelope.Copies:
    """The envelopes of the copies of ``data`` (with the publish's trace context, if any);
    ``TypeError`` when it cannot be stored."""
    try:
        return envelope.Copies(data, trace)
    except TypeError as exc:
        raise TypeError(f"{subject}: publish to {name!r}: {exc}") from None
