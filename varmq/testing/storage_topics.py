"""The reference storage's topics: bindings kept in the storage, copies stored in one step, and
live subscribers whose connection a test can take away.

``MemoryStorage.topics()`` returns a :class:`ReferenceTopics`, which implements ``IStorageTopics``
and ``ILiveTopics`` of ``varmq.contract.protocols`` ("Topics"). Every topics object of one storage
shares its bindings, as every process of one Redis server or SQLite file does, and ``publish``
stores its copies under the storage's one lock: the atomic step. The names and patterns are checked,
and bindings matched, by ``varmq.contract.topic_names`` (standard library only, as every storage
matches them). Live subscribers are the core's in-memory subscriptions (:class:`varmq.Topics`, one
per storage), wrapped to count reconnections and missed publishes. Inside
``MemoryStorage.disconnect_subscribers()`` they are disconnected: what is published meanwhile never
reaches them and is counted in ``missed`` when they reconnect on leaving the block. One difference
from a storage in another process: a live subscriber with ``on_full="block"`` makes the publisher
wait, since here both are in one process.
"""

from __future__ import annotations

import contextlib
import heapq
import logging
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from varmq import Subscription, Topics
from varmq.contract import envelope, observe
from varmq.contract.protocols import DEFAULT_TOPIC_DEDUP_TTL
from varmq.contract.rules import check
from varmq.contract.rules import check_name as check_queue_name
from varmq.contract.topic_names import OnFull, check_name, check_pattern, copy_id, matches
from varmq.testing.faults import Faults

__all__ = ["ReferenceLiveSubscription", "ReferenceTopics", "TopicState"]

_log = logging.getLogger("varmq.testing")


class MemoryStorage(Protocol):
    """What the topics use of their storage (:class:`varmq.testing.storage.MemoryStorage`): its
    one lock, its clock, its queues by name, and storing a copy under the lock."""

    _lock: threading.Lock
    _named: dict[str, Any]

    @property
    def location(self) -> str: ...

    def _clock(self) -> float: ...

    def _store_locked(self, queue: str, item: bytes, job_id: str | None, now: float) -> bool: ...


class TopicState:
    """The topics of one :class:`MemoryStorage`: what every topics object of it shares.

    ``bindings`` and the connection state are guarded by the storage's lock; ``live`` (the
    in-memory topics that live subscribers hang on) has a lock of its own and is called
    outside the storage's.
    """

    def __init__(self) -> None:
        # (pattern, queue) -> the pattern's words, in the order bound.
        self.bindings: dict[tuple[str, str], tuple[str, ...]] = {}
        self.live = Topics(dedup_window=0)  # at-most-once: a retried publish comes again
        self.subscriptions: list[ReferenceLiveSubscription] = []
        self.connected = True
        self.missed_meanwhile = 0  # publishes while disconnected
        # Published message ids kept for dedup: id -> until (storage clock), and a heap of
        # (until, id) to drop the expired ones soonest first.
        self.message_ids: dict[str, float] = {}
        self.message_id_expiry: list[tuple[float, str]] = []

    def seen_locked(self, message_id: str, now: float) -> bool:
        """Whether ``message_id`` is kept (dropping the expired ids first). Holds the lock."""
        expiry = self.message_id_expiry
        while expiry and expiry[0][0] <= now:
            until, old = heapq.heappop(expiry)
            if self.message_ids.get(old) == until:
                del self.message_ids[old]
        return message_id in self.message_ids

    def keep_locked(self, message_id: str, until: float) -> None:
        """Keep ``message_id`` until ``until`` (storage clock). Holds the storage's lock."""
        self.message_ids[message_id] = until
        heapq.heappush(self.message_id_expiry, (until, message_id))


class ReferenceTopics:
    """The topics of a :class:`MemoryStorage` (``storage.topics()``): ``IStorageTopics`` and
    ``ILiveTopics``. Its ``faults`` switches are the queues' (``Faults.unreachable`` makes
    every call raise, as ``storage.outage()`` does)."""

    def __init__(
        self,
        storage: MemoryStorage,
        state: TopicState,
        faults: Faults,
        dedup_ttl: float = DEFAULT_TOPIC_DEDUP_TTL,
    ) -> None:
        self._storage = storage
        self._state = state
        self.faults = faults
        self._subject = "memory storage: topics"
        self._dedup_ttl = float(check(self._subject, "dedup_ttl", dedup_ttl))
        self._opened: list[ReferenceLiveSubscription] = []

    # -- bindings ------------------------------------------------------------------------

    def bind(self, pattern: str, queue: str) -> bool:
        """Route every publish matching ``pattern`` into the queue named ``queue`` (made a
        FIFO queue by the first copy if it was never opened); whether the binding is new."""
        words = check_pattern(pattern)
        check_queue_name(self._storage.location, queue)
        self.faults.reach()
        with self._storage._lock:
            if (pattern, queue) in self._state.bindings:
                return False
            self._state.bindings[(pattern, queue)] = words
            return True

    def unbind(self, pattern: str, queue: str) -> bool:
        """Remove the binding of ``queue`` under ``pattern``; whether there was one."""
        check_pattern(pattern)
        check_queue_name(self._storage.location, queue)
        self.faults.reach()
        with self._storage._lock:
            return self._state.bindings.pop((pattern, queue), None) is not None

    def bindings(self) -> list[tuple[str, str]]:
        """Every binding of this storage as ``(pattern, queue)``, sorted."""
        self.faults.reach()
        with self._storage._lock:
            return sorted(self._state.bindings)

    # -- publishing ----------------------------------------------------------------------

    def publish(self, name: str, data: Any, *, message_id: str | None = None) -> int:
        """Store a copy of ``data`` in every bound queue whose pattern matches ``name``, all
        in one step; how many copies were stored (a copy whose job id is stored already is
        not stored again). Live subscribers connected now receive it too."""
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
        try:
            copies = envelope.Copies(data, trace)
        except TypeError as exc:
            raise TypeError(f"{self._subject}: publish to {name!r}: {exc}") from None
        self.faults.reach()
        storage, state = self._storage, self._state
        stored = 0
        notify: list[Callable[[str], None]] = []
        with storage._lock:
            now = storage._clock()
            if message_id and self._dedup_ttl:
                if state.seen_locked(message_id, now):
                    return 0  # published within the window: nothing stored, nothing announced
                state.keep_locked(message_id, now + self._dedup_ttl)
            queues = sorted({q for (_, q), p in state.bindings.items() if matches(p, words)})
            for queue in queues:
                job_id = copy_id(message_id, queue) if message_id else uuid.uuid4().hex
                item = copies.of(job_id)
                if storage._store_locked(queue, item, job_id if message_id else None, now):
                    stored += 1
                    notify.extend(callback for _, callback in storage._named[queue].subscribers)
            connected = state.connected
            if not connected:
                state.missed_meanwhile += 1
        for callback in notify:  # outside the lock: a callback may call back into the storage
            try:
                callback("enqueued")
            except Exception:
                _log.warning("topics: a queue subscriber raised; ignored", exc_info=True)
        if connected:
            state.live._publish(name, data, message_id)  # the relay: not a publish of its own
        return stored

    # -- live subscribers ----------------------------------------------------------------

    def subscribe(
        self,
        pattern: str,
        *,
        max_pending: int = 1000,
        on_full: OnFull = "block",
        block_timeout: float | None = None,
    ) -> ReferenceLiveSubscription:
        """A live subscription to every name ``pattern`` matches, published through any
        topics object of this storage while it is connected (at-most-once)."""
        self.faults.reach()
        live = ReferenceLiveSubscription(
            self._state.live.subscribe(
                pattern, max_pending=max_pending, on_full=on_full, block_timeout=block_timeout
            )
        )
        with self._storage._lock:
            self._state.subscriptions.append(live)
        self._opened.append(live)
        return live

    def close(self) -> None:
        """End the live subscriptions made through this object; bindings stay in storage."""
        opened, self._opened = self._opened, []
        for live in opened:
            live.unsubscribe()

    def __repr__(self) -> str:
        return f"<ReferenceTopics of {self._storage!r}>"


class ReferenceLiveSubscription(Subscription):
    """A live subscriber of the reference storage (``ILiveSubscription``): an in-memory
    subscription that also counts its reconnections and what it may have missed."""

    def __init__(self, inner: Subscription) -> None:
        super().__init__(inner._sub)
        self.missed = 0  # both written under the storage's lock, at reconnection
        self.reconnects = 0


@contextlib.contextmanager
def disconnected(storage: MemoryStorage, state: TopicState) -> Iterator[None]:
    """Take the live subscribers' connection away for the ``with`` block, then let them
    reconnect, each counting one reconnection and what was published meanwhile."""
    with storage._lock:
        state.connected = False
        state.missed_meanwhile = 0
    try:
        yield
    finally:
        with storage._lock:
            state.connected = True
            for live in state.subscriptions:
                if live.active:
                    live.reconnects += 1
                    live.missed += state.missed_meanwhile
            state.subscriptions = [live for live in state.subscriptions if live.active]
