"""In-memory topics: publish once, and every subscriber and bound queue whose pattern matches
gets a copy.

``varmq.new_topics()`` makes a :class:`Topics`. Its recipients are of two kinds:

- *subscribers*, each with a bounded buffer of its own: :meth:`Topics.subscribe` (a
  :class:`~varmq.topics.subscription.Subscription` to iterate) and ``worker.bind_topic`` (a worker
  that runs a job per message, :mod:`varmq.sources.topic`);
- *bindings*: :meth:`Topics.bind` routes every matching publish into a queue handle (in memory
  or in storage) through the handle's ``add``.

The order copies are made in, by one ``publish``: first every subscriber with room in its
buffer (and every ``drop_*`` subscriber, which never waits), in the order they subscribed;
then every bound queue, in the order of the binds; last, one after another, the ``block``
subscribers whose buffer was full, each waited for up to its ``block_timeout``. So a slow
subscriber delays the publisher, never the other recipients. When a copy cannot be made, the
others are made all the same, and ``publish`` then raises the first failure
(:class:`~varmq.SubscriberFullError`, or the :class:`~varmq.EnqueueError` of a bound queue).

With a ``message_id``, a publish is made at most once: the ids of the last ``dedup_window``
publishes are remembered, and a publish of one of them makes no copy (after a failed publish,
it makes only the copies that are missing). Bound queues are given the copy's job id
:func:`~varmq.contract.topic_names.copy_id` ``(message_id, queue)``, so a storage queue's own dedup
stores a publish retried by another process, or after a restart, once.

One lock guards a topics object: subscribing, binding, and the fan-out of each publish to the
subscribers' buffers (bound queues are called outside it). Routes (which recipients a name
reaches) are worked out once per name and kept until a subscriber or binding changes.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections import OrderedDict
from typing import Any, NamedTuple

from ..contract import observe
from ..contract.topic_names import ON_FULL, OnFull, PatternTrie, check_name, check_pattern, copy_id
from ..model import validate
from ..model.errors import SubscriberFullError
from .fanout import Later, Route, deliver_checked
from .subscription import Raw, Subscriber, SubscriberStats, Subscription

__all__ = ["DEFAULT_DEDUP_WINDOW", "Binding", "Topics"]

log = logging.getLogger("varmq.topics")

DEFAULT_DEDUP_WINDOW = 10_000
"""How many message ids a topics object remembers unless told otherwise."""

# Routes kept at most; past this, all are worked out again (names of unbounded variety).
_ROUTE_CACHE = 4096


class Binding(NamedTuple):
    """One entry of :meth:`Topics.bindings`: a pattern and the queue handle it routes into."""

    pattern: str
    handle: Any


class _Bound:
    """A binding as the route table holds it (one object per bind, so the same handle may be
    bound under several patterns)."""

    __slots__ = ("handle", "pattern", "queue", "words")

    def __init__(self, pattern: str, words: tuple[str, ...], handle: Any, queue: str) -> None:
        self.pattern = pattern
        self.words = words
        self.handle = handle
        self.queue = queue


class _Outcome(NamedTuple):
    """What a publish did: the copies made, the first failure, and the recipients that have
    the message now (kept for a retry when it failed)."""

    copies: int
    failure: BaseException | None
    got: set[object]


class _Mark:
    """A marker in the table of message ids."""


_NOTHING_LATER = Later()  # never written to: a publish with nothing left for after the lock

_BUSY = _Mark()  # being published right now (by another thread)
_MISSING = _Mark()  # not in the table


class Topics:
    """Topics in this process: ``publish`` delivers a copy to every matching subscriber and
    bound queue (see the module docstring for the order, failures and idempotency).

    Made by :func:`varmq.new_topics`. Every method may be called from any thread.
    """

    def __init__(self, *, dedup_window: int = DEFAULT_DEDUP_WINDOW) -> None:
        self._dedup_window = validate.whole("dedup_window", dedup_window, minimum=0)
        # Guards everything below, every Subscriber's state and the appends to their buffers.
        # Invariant while it is free: the trie holds exactly the active subscribers and the
        # bindings; every cached route is what the trie gives for its name; and each buffer
        # has had at most one append per increment of _count since any route's `until` was set.
        self._lock = threading.Lock()
        self._trie: PatternTrie[Subscriber | _Bound] = PatternTrie()
        self._subscribers: list[Subscriber] = []
        self._bound: list[_Bound] = []
        self._routes: dict[str, Route] = {}
        self._count = 0
        self._watched = 0  # readers waiting on any subscriber (sync or async)
        # message id -> None (published), _BUSY (being published) or the recipients that got
        # their copy when a publish failed part way; the oldest beyond the window are dropped.
        self._seen: OrderedDict[str, Any] = OrderedDict()
        self._numbers = itertools.count(1)

    # -- publishing ----------------------------------------------------------------------

    def publish(self, name: str, data: Any, *, message_id: str | None = None) -> int:
        """Deliver ``data`` to every subscriber and bound queue whose pattern matches ``name``;
        how many copies it made.

        A ``drop_newest`` subscriber that was full gets no copy and is not counted; a
        ``drop_oldest`` one gets it (its oldest message is dropped instead). With a
        ``message_id`` already published (within the last ``dedup_window``), no copy is made
        and 0 is returned. Raises ``ValueError`` for a bad name,
        :class:`~varmq.SubscriberFullError` when a ``block`` subscriber stayed full past its
        ``block_timeout``, and the :class:`~varmq.EnqueueError` of a bound queue that refused
        its copy; the other copies are made first.
        """
        if observe.OBSERVER is None:
            return self._publish(name, data, message_id)
        return observe.observed_publish(
            name, message_id, lambda _: self._publish(name, data, message_id)
        )

    def _publish(self, name: str, data: Any, message_id: str | None) -> int:
        """:meth:`publish`."""
        if message_id is not None:
            return self._publish_once(name, data, message_id)
        message = (name, data, None)
        with self._lock:
            try:
                route = self._routes[name]
            except KeyError:
                route = self._route_locked(name)
            except TypeError:  # unhashable: not a name
                check_name(name)
                raise
            count = self._count = self._count + 1
            if count > route.until:
                route.refresh(count)
            route.fast += 1
            for append in route.appends:
                append(message)
            if self._watched:
                for sub in route.unchecked:
                    sub.wake_locked()
            if route.plain:
                return route.size
            copies, later = deliver_checked(route.checked, message, None, self._watched > 0)
            if later is None and not route.fast_sinks and not route.bound:
                return route.size + copies
        outcome = self._finish(route, message, copies, later, None, True)
        if outcome.failure is not None:
            raise outcome.failure
        return outcome.copies

    def _publish_once(self, name: str, data: Any, message_id: str) -> int:
        """A publish with a message id: made at most once within the dedup window."""
        if not isinstance(message_id, str) or not message_id:
            raise TypeError(
                f"varmq: message_id must be a non-empty str, got {message_id!r} "
                f"({type(message_id).__name__})"
            )
        message = (name, data, message_id)
        seen = self._seen
        window = self._dedup_window
        with self._lock:
            route = self._routes.get(name) if isinstance(name, str) else None
            if route is None:
                route = self._route_locked(name)
            done: set[object] | None = None
            if window:
                state = seen.get(message_id, _MISSING)
                if state is None or state is _BUSY:
                    return 0  # published already, or being published by another thread
                if isinstance(state, set):
                    done = state
                seen[message_id] = _BUSY
                while len(seen) > window:
                    seen.popitem(last=False)
            count = self._count = self._count + 1
            got: set[object] = set()
            if done is not None:  # a retry: look at every subscriber, skip those done
                got.update(done)
                todo = [sub for sub in route.subs if sub not in done]
                copies, later = deliver_checked(todo, message, got, self._watched > 0)
                fast = False
            else:
                if count > route.until:
                    route.refresh(count)
                route.fast += 1
                for append in route.appends:
                    append(message)
                got.update(route.unchecked)
                if self._watched:
                    for sub in route.unchecked:
                        sub.wake_locked()
                copies, later = deliver_checked(route.checked, message, got, self._watched > 0)
                fast = True
        outcome = self._finish(route, message, copies, later, got, fast)
        if window:
            with self._lock:
                if message_id in seen:  # unless the window moved past it meanwhile
                    seen[message_id] = None if outcome.failure is None else outcome.got
        if outcome.failure is not None:
            raise outcome.failure
        return outcome.copies

    def _finish(
        self,
        route: Route,
        message: Raw,
        copies: int,
        later: Later | None,
        got: set[object] | None,
        fast: bool,
    ) -> _Outcome:
        """The part of a publish outside the lock, after ``copies`` were made under it: tell
        the workers, log first drops, fill the bound queues, then wait for the full ``block``
        subscribers one after another."""
        if fast:
            copies += route.size
            for sink in route.fast_sinks:
                sink(1, 0)
        later = later or _NOTHING_LATER
        for sub in later.warn:
            log.warning(
                "varmq: topic subscriber %r (%r) is full and drops messages (%s); "
                "its stats() and `dropped` count them",
                sub.name,
                sub.pattern,
                sub.on_full,
            )
        for sink, copied, dropped in later.told:
            sink(copied, dropped)
        failure: BaseException | None = None
        bound = route.bound if got is None else tuple(b for b in route.bound if b not in got)
        if bound:
            added, failure = self._add_to_bound(bound, message, got)
            copies += added
        if later.blocked:
            full: list[Subscriber] = []
            for sub in later.blocked:
                if self._wait_for_room(sub, message):
                    if got is not None:
                        got.add(sub)
                    copies += 1
                    if sub.sink is not None:
                        sub.sink(1, 0)
                elif sub.active:
                    full.append(sub)
            if full and failure is None:
                failure = SubscriberFullError([s.name for s in full], message[0], copies)
        return _Outcome(copies, failure, got if got is not None else set())

    def _wait_for_room(self, sub: Subscriber, message: Raw) -> bool:
        """Wait (without the lock held) until ``sub`` has room, up to its ``block_timeout``,
        and append ``message``; whether it was appended."""
        timeout = sub.block_timeout
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            sub.blocked += 1
            try:
                while sub.active and len(sub.items) >= sub.max_pending:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        break
                    sub.room.wait(remaining)
            finally:
                sub.blocked -= 1
            if sub.active and len(sub.items) < sub.max_pending:
                sub.items.append(message)
                self._count += 1  # one more append: keeps every route's `until` true
                sub.wake_locked()
                return True
            sub.refused += 1
            first = not sub.warned and sub.active
            sub.warned = True
        if first:  # logged outside the lock: a handler may publish
            log.warning(
                "varmq: topic subscriber %r (%r) stayed full for %s s; publish raises "
                "SubscriberFullError",
                sub.name,
                sub.pattern,
                timeout,
            )
        return False

    def _add_to_bound(
        self, bound: tuple[_Bound, ...], message: Raw, got: set[object] | None
    ) -> tuple[int, BaseException | None]:
        """Add a copy to each bound handle (outside the lock); the copies made, and the first
        failure."""
        added = 0
        failure: BaseException | None = None
        message_id = message[2]
        for entry in bound:
            job_id = None if message_id is None else copy_id(message_id, entry.queue)
            try:
                entry.handle.add(message[1], job_id=job_id, strict=True)
            except Exception as exc:
                if failure is None:
                    failure = exc
                continue
            added += 1
            if got is not None:
                got.add(entry)
        return added, failure

    # -- routes --------------------------------------------------------------------------

    def _route_locked(self, name: Any) -> Route:
        """Work out (and keep) the route of ``name``; ``ValueError`` for a bad name."""
        words = check_name(name)
        subs: list[Subscriber] = []
        bound: list[_Bound] = []
        handles: set[int] = set()
        for value in self._trie.match(words):
            if isinstance(value, Subscriber):
                subs.append(value)
            elif id(value.handle) not in handles:  # one copy per handle, however many binds
                handles.add(id(value.handle))
                bound.append(value)
        route = Route(tuple(subs), tuple(bound))
        if len(self._routes) >= _ROUTE_CACHE:
            self._forget_routes_locked()
        self._routes[name] = route
        return route

    def _forget_routes_locked(self) -> None:
        """Drop every route (the recipients changed), keeping the counts of fast publishes."""
        for route in self._routes.values():
            route.fold()
        self._routes.clear()

    def _received_locked(self, sub: Subscriber) -> int:
        return sub.received + sum(r.fast for r in self._routes.values() if sub in r.unchecked)

    # -- subscribers ---------------------------------------------------------------------

    def subscribe(
        self,
        pattern: str,
        *,
        max_pending: int = 1000,
        on_full: OnFull = "block",
        block_timeout: float | None = None,
        name: str | None = None,
    ) -> Subscription:
        """A new subscriber to every name ``pattern`` matches, to iterate for the messages.

        It buffers up to ``max_pending`` messages. When its buffer is full, ``on_full`` says
        what a publish does: ``"block"`` waits for room up to ``block_timeout`` seconds
        (``None``: as long as it takes), then raises :class:`~varmq.SubscriberFullError`;
        ``"drop_oldest"`` drops the oldest buffered message, ``"drop_newest"`` the new one,
        both counted in ``dropped``. ``name`` names it in errors and ``stats()``.
        """
        sub = self._new_subscriber(pattern, max_pending, on_full, block_timeout, name)
        self._add_subscriber(sub)
        return Subscription(sub)

    def _new_subscriber(
        self,
        pattern: str,
        max_pending: int,
        on_full: OnFull,
        block_timeout: float | None,
        name: str | None,
    ) -> Subscriber:
        """A subscriber, checked, not subscribed yet (``bind_topic`` attaches its worker first)."""
        words = check_pattern(pattern)
        validate.whole("max_pending", max_pending, minimum=1)
        if on_full not in ON_FULL:
            raise ValueError(
                f"varmq: on_full must be one of {', '.join(map(repr, ON_FULL))}, got {on_full!r}"
            )
        if block_timeout is not None:
            block_timeout = validate.seconds("block_timeout", block_timeout)
        validate.instance("name", name, str)
        label = name or f"subscriber-{next(self._numbers)}"
        return Subscriber(self, label, pattern, words, max_pending, on_full, block_timeout)

    def _add_subscriber(self, sub: Subscriber) -> None:
        with self._lock:
            self._trie.add(sub.words, sub)
            self._subscribers.append(sub)
            self._forget_routes_locked()

    def _unsubscribe(self, sub: Subscriber) -> bool:
        with self._lock:
            if not sub.active:
                return False
            self._forget_routes_locked()
            self._trie.remove(sub.words, sub)
            self._subscribers.remove(sub)
            sub.left_locked()
            return True

    def stats(self) -> list[SubscriberStats]:
        """The counts of every subscriber, in the order they subscribed."""
        with self._lock:
            return [s.stats_locked(self._received_locked(s)) for s in self._subscribers]

    def _stats_of(self, sub: Subscriber) -> SubscriberStats:
        with self._lock:
            return sub.stats_locked(self._received_locked(sub))

    # -- bindings ------------------------------------------------------------------------

    def bind(self, pattern: str, handle: Any) -> bool:
        """Route every publish matching ``pattern`` into the queue ``handle`` (any handle with
        ``add``: in memory, persistent, distributed); whether the binding is new.

        Each copy is added with ``add(data, job_id=copy_id(message_id, queue), strict=True)``
        (no job id without a ``message_id``). A handle reached by several of its bindings gets
        one copy per publish.
        """
        words = check_pattern(pattern)
        if not callable(getattr(handle, "add", None)):
            raise TypeError(
                f"varmq: bind needs a queue handle (something with add()), got "
                f"{type(handle).__name__}"
            )
        with self._lock:
            if any(b.pattern == pattern and b.handle is handle for b in self._bound):
                return False
            entry = _Bound(pattern, words, handle, queue_name(handle))
            self._trie.add(words, entry)
            self._bound.append(entry)
            self._forget_routes_locked()
            return True

    def unbind(self, pattern: str, handle: Any) -> bool:
        """Remove the binding of ``handle`` under ``pattern``; whether there was one."""
        check_pattern(pattern)
        with self._lock:
            for entry in self._bound:
                if entry.pattern == pattern and entry.handle is handle:
                    self._bound.remove(entry)
                    self._trie.remove(entry.words, entry)
                    self._forget_routes_locked()
                    return True
            return False

    def bindings(self) -> list[Binding]:
        """Every binding, as ``(pattern, handle)``, in the order they were made."""
        with self._lock:
            return [Binding(b.pattern, b.handle) for b in self._bound]

    def __repr__(self) -> str:
        return f"<Topics: {len(self._subscribers)} subscribers, {len(self._bound)} bindings>"


def queue_name(handle: Any) -> str:
    """The name of the queue behind ``handle``, as copies' job ids use it."""
    source = getattr(handle, "_source", None)
    label = getattr(source, "label", None)
    if isinstance(label, str) and label:
        return label
    name = getattr(getattr(handle, "_storage", None), "name", None)
    if isinstance(name, str) and name:
        return name
    return type(handle).__name__
