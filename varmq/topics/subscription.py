"""One subscriber of an in-memory topics object: its bounded buffer, and the waits on both
sides of it (readers waiting for a message, publishers waiting for room).

:class:`Subscription` is what ``topics.subscribe`` returns: a sync and an async iterator over
:class:`Message` values. Behind it, and behind every ``worker.bind_topic``, is a
:class:`Subscriber`, whose state is guarded by the lock of the :class:`~varmq.topics.topics.Topics`
that owns it (publishing fans out under that one lock). The buffer itself is a ``deque``:
publishers append under the lock, readers pop without it (a ``popleft`` is atomic), so reading
never waits for a publish in progress. No I/O here.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from types import TracebackType
from typing import Any, NamedTuple, Protocol, TypedDict

from typing_extensions import Self

from ..contract.topic_names import OnFull

__all__ = ["Hub", "Message", "Raw", "SubscriberStats", "SubscriberView", "Subscription"]

Raw = tuple[str, Any, "str | None"]
"""A message as buffers hold it: ``(name, data, message_id)``, a plain tuple (the cheapest
thing to make once per publish); readers see it as a :class:`Message`."""


class Message(NamedTuple):
    """One published message as a subscriber receives it.

    Every subscriber gets the same ``data`` object (no deep copy is made): treat it as read-only.
    """

    name: str
    """The topic name it was published to (``orders.eu.created``)."""
    data: Any
    """What was published."""
    message_id: str | None
    """The ``message_id`` given to ``publish``, if any."""


class SubscriberStats(TypedDict):
    """What ``stats()`` reports for one subscriber.

    ``received == taken + pending + dropped + refused`` at all times.
    """

    name: str
    """The subscriber's name (given, or made up at subscribe)."""
    pattern: str
    on_full: str
    max_pending: int
    active: bool
    """False once unsubscribed."""
    received: int
    """Publishes that matched while it was subscribed."""
    pending: int
    """Messages in its buffer now."""
    taken: int
    """Messages read from its buffer (by an iterator, or the worker it is bound to)."""
    dropped: int
    """Copies dropped because the buffer was full (``drop_oldest``, ``drop_newest``)."""
    refused: int
    """Copies never made because the buffer stayed full past ``block_timeout`` (``block``:
    the publisher got :class:`~varmq.SubscriberFullError`), or the subscriber left while a
    publisher waited for room."""


_new_message = tuple.__new__


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class Hub(Protocol):
    """The topics object that owns a subscriber (:class:`~varmq.topics.topics.Topics`), as the
    subscriber sees it: the lock that guards them both, the count of readers waiting on any of
    its subscribers, and the calls that go through it."""

    _lock: threading.Lock
    _watched: int

    def _stats_of(self, sub: Subscriber) -> SubscriberStats: ...

    def _unsubscribe(self, sub: Subscriber) -> bool: ...


class Subscriber:
    """The buffer and counters of one subscriber; everything but ``items`` is guarded by
    ``lock``, the owning topics object's lock.

    Invariant while the lock is free: ``len(items) <= max_pending``; ``blocked`` counts the
    publishers waiting on ``room``; ``parked`` holds one acquired lock per reader waiting for
    a message (a publish releases one per message, so each wake is one handoff with no lock to
    take again, as in ``queue.SimpleQueue``); the owner's ``_watched`` counts every parked
    reader and async waiter of its subscribers.
    """

    __slots__ = (
        "active",
        "async_waiters",
        "block_timeout",
        "blocked",
        "dropped",
        "hub",
        "items",
        "lock",
        "max_pending",
        "name",
        "on_full",
        "parked",
        "pattern",
        "received",
        "refused",
        "room",
        "sink",
        "warned",
        "words",
    )

    def __init__(
        self,
        hub: Hub,
        name: str,
        pattern: str,
        words: tuple[str, ...],
        max_pending: int,
        on_full: OnFull,
        block_timeout: float | None,
    ) -> None:
        self.hub = hub
        self.lock: threading.Lock = hub._lock
        self.name = name
        self.pattern = pattern
        self.words = words
        self.max_pending = max_pending
        self.on_full = on_full
        self.block_timeout = block_timeout
        self.items: deque[Raw] = deque()
        self.active = True
        # Counted by slow publishes; fast ones are counted per route (Topics._received_locked).
        self.received = 0
        self.dropped = 0
        self.refused = 0
        self.warned = False  # the first drop or refusal is logged, once
        self.blocked = 0
        self.room = threading.Condition(self.lock)
        self.parked: list[threading.Lock] = []
        self.async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        #: A worker's source bound to this subscriber: told ``(copies, dropped)`` after each
        #: publish that reached it (outside the lock).
        self.sink: Callable[[int, int], None] | None = None

    # -- the reader's side (no lock to take a message) -----------------------------------

    def pop(self) -> Raw | None:
        """Take the oldest message, or ``None`` when the buffer is empty."""
        try:
            message = self.items.popleft()
        except IndexError:
            return None
        if self.blocked:  # a publisher waits for room: there is some now
            self.made_room()
        return message

    def made_room(self) -> None:
        """A reader took a message while a publisher waits for room: wake one."""
        with self.lock:
            self.room.notify()

    def _pop_locked(self) -> Raw | None:
        try:
            message = self.items.popleft()
        except IndexError:
            return None
        if self.blocked:
            self.room.notify()
        return message

    def get(self, timeout: float | None) -> Raw | None:
        """The oldest message, waiting up to ``timeout`` seconds (``None``: until one comes or
        the subscriber leaves); ``None`` if none came."""
        message = self.pop()
        if message is not None:
            return message
        deadline = None if timeout is None else time.monotonic() + timeout
        hub = self.hub
        while True:
            with self.lock:
                message = self._pop_locked()
                if message is not None or not self.active:
                    return message
                remaining = -1.0 if deadline is None else deadline - time.monotonic()
                if deadline is not None and remaining <= 0:
                    return None
                park = threading.Lock()
                park.acquire()
                self.parked.append(park)
                hub._watched += 1
            if not park.acquire(timeout=remaining):
                with self.lock:
                    if park in self.parked:  # nobody woke it: withdraw
                        self.parked.remove(park)
                        hub._watched -= 1
            message = self.pop()
            if message is not None:
                return message

    async def get_async(self, timeout: float | None) -> Raw | None:
        """:meth:`get` for a coroutine: the event loop is never blocked while it waits."""
        message = self.pop()
        if message is not None:
            return message
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else time.monotonic() + timeout
        hub = self.hub
        while True:
            with self.lock:
                message = self._pop_locked()
                if message is not None or not self.active:
                    return message
                future: asyncio.Future[None] = loop.create_future()
                self.async_waiters.append((loop, future))
                hub._watched += 1
            remaining = None if deadline is None else deadline - time.monotonic()
            try:
                if remaining is None or remaining > 0:
                    await asyncio.wait({future}, timeout=remaining)
            finally:
                with self.lock:
                    hub._watched -= 1
                    with contextlib.suppress(ValueError):
                        self.async_waiters.remove((loop, future))
            if deadline is not None and time.monotonic() >= deadline:
                return self.pop()

    # -- the publisher's side (under the lock) -------------------------------------------

    def wake_locked(self) -> None:
        """A message arrived: wake one parked reader, and the async waiters."""
        if self.parked:
            self.hub._watched -= 1
            self.parked.pop(0).release()
        if self.async_waiters:
            waiting, self.async_waiters = self.async_waiters, []
            for loop, future in waiting:
                with contextlib.suppress(RuntimeError):  # that loop is closed: nobody to wake
                    loop.call_soon_threadsafe(_resolve, future)

    def left_locked(self) -> None:
        """Unsubscribed: every waiting reader and publisher wakes and sees it."""
        self.active = False
        self.room.notify_all()
        while self.parked or self.async_waiters:
            self.wake_locked()

    def stats_locked(self, received: int) -> SubscriberStats:
        pending = len(self.items)
        return {
            "name": self.name,
            "pattern": self.pattern,
            "on_full": self.on_full,
            "max_pending": self.max_pending,
            "active": self.active,
            "received": received,
            "pending": pending,
            "taken": max(received - pending - self.dropped - self.refused, 0),
            "dropped": self.dropped,
            "refused": self.refused,
        }

    def __repr__(self) -> str:
        return f"<subscriber {self.name!r} on {self.pattern!r}>"


class SubscriberView:
    """What every handle on one subscriber shows: its name, pattern, state and counts, and
    :meth:`unsubscribe`."""

    __slots__ = ("_sub",)

    def __init__(self, sub: Subscriber) -> None:
        self._sub = sub

    @property
    def name(self) -> str:
        """The subscriber's name, as errors and ``stats()`` show it."""
        return self._sub.name

    @property
    def pattern(self) -> str:
        """The pattern it subscribed with."""
        return self._sub.pattern

    @property
    def active(self) -> bool:
        """Whether it still receives publishes (False after :meth:`unsubscribe`)."""
        return self._sub.active

    @property
    def dropped(self) -> int:
        """Copies dropped because its buffer was full (``drop_oldest``/``drop_newest``)."""
        return self._sub.dropped

    def stats(self) -> SubscriberStats:
        """Its counts: received, pending, taken, dropped, refused."""
        return self._sub.hub._stats_of(self._sub)

    def unsubscribe(self) -> bool:
        """Stop receiving publishes; whether it was subscribed. Waiting publishers and readers
        wake; messages already buffered are still read (or, bound to a worker, still run)."""
        return self._sub.hub._unsubscribe(self._sub)


class Subscription(SubscriberView):
    """A live subscriber of a topics object: iterate it (``for``, ``async for``) for each
    matching message, as a :class:`Message`.

    Iteration waits for the next message and ends once :meth:`unsubscribe` was called and
    the buffer is empty (messages already buffered are still given). ``with subscription:``
    unsubscribes on leaving. Any thread or event loop may read; each message goes to one
    reader.
    """

    __slots__ = ()

    def __len__(self) -> int:
        """Messages waiting in its buffer."""
        return len(self._sub.items)

    def get(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds (``None``: as long as it takes);
        ``None`` if none came in time, or it was unsubscribed and nothing is left."""
        raw = self._sub.get(timeout)
        return None if raw is None else _new_message(Message, raw)

    async def get_async(self, timeout: float | None = None) -> Message | None:
        """:meth:`get` without blocking the event loop."""
        raw = await self._sub.get_async(timeout)
        return None if raw is None else _new_message(Message, raw)

    def __iter__(self) -> Iterator[Message]:
        return self

    def __next__(self) -> Message:
        sub = self._sub
        try:  # Subscriber.pop, inlined: this is the path of every message read
            raw = sub.items.popleft()
        except IndexError:
            waited = sub.get(None)
            if waited is None:
                raise StopIteration from None
            raw = waited
        else:
            if sub.blocked:
                sub.made_room()
        return _new_message(Message, raw)

    def __aiter__(self) -> AsyncIterator[Message]:
        return self

    async def __anext__(self) -> Message:
        raw = await self._sub.get_async(None)
        if raw is None:
            raise StopAsyncIteration
        return _new_message(Message, raw)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.unsubscribe()

    def __repr__(self) -> str:
        state = "active" if self._sub.active else "unsubscribed"
        return f"<Subscription {self.name!r} on {self.pattern!r}, {state}, {len(self)} pending>"
