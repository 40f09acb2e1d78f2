"""``Queues.topics()``: topic bindings kept in Redis, publishing into bound queues, and live
subscribers over Redis pub/sub.

What a :class:`Topics` object offers is ``IStorageTopics`` and ``ILiveTopics`` of
``varmq.contract.protocols`` ("Topics"). The whole storage protocol is ``topics.lua`` (Redis
Cluster: with ``queue.lua``'s enqueue); the keys are in ``_keys.py``.

Bindings
    One SET of ``["<pattern>","<queue>"]`` members and a version counter bumped by every bind
    and unbind that changed it, under the hash tag ``{topics}``. Every process reads them, so
    every process honours every binding.

Publishing
    The publisher matches the name against the bindings it last read (a trie of patterns, in
    this process) and runs one script with the keys of exactly the queues they route to and
    the version it routed by. The script stores the copies only if the bindings are still of
    that version (else the publisher reads them again and retries): the copies, the dedup
    check of each and the reading of the bindings are one atomic step. Each stored copy is
    announced with ``"enqueued"`` on its queue's channel, which is what distributed queues in
    every process listen to. On a Redis Cluster the queues live in different slots, so no
    script can touch them together: each copy is stored by its own ``enqueue`` of the queue
    (dedup by the same job id when there is a ``message_id``, so a retried publish completes a
    partial one and stores nothing twice). A ``message_id`` is also kept, in a sorted set by
    expiry, for the ``dedup_ttl`` of the publishing object: a publish of a kept id stores
    nothing, whoever consumed the first copies (Redis Cluster: checked before the copies, kept
    after the last).

Live subscribers
    Every publish bumps a counter and publishes ``"<sequence> <message>"`` on the channel of
    its name (``redisq:topic:<name>``). A :class:`LiveSubscription` has a connection and a
    thread of its own, subscribed to a channel glob made of its pattern's leading literal
    words; it matches the rest of the pattern itself. After a dropped connection or a restart
    of the server it subscribes again, counts that in ``reconnects`` and adds to ``missed`` how
    far the publish counter moved past the last sequence it knew of: an upper bound of what it
    may have missed (publishes its pattern would not match are counted too). At-most-once:
    nothing is kept for a subscriber while it is away.

Every call raises :class:`TopicsUnavailableError` (a ``ConnectionError`` naming the server)
when Redis cannot be reached or refuses; nothing is silently dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.resources
import itertools
import json
import logging
import math
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from redis.cluster import RedisCluster

from varmq.contract import envelope, observe
from varmq.contract.protocols import DEFAULT_TOPIC_DEDUP_TTL
from varmq.contract.rules import check
from varmq.contract.rules import check_name as check_queue_name
from varmq.contract.topic_names import (
    ON_FULL,
    PatternTrie,
    check_name,
    check_pattern,
    copy_id,
    matches,
)

from ._keys import REGISTRY, TOPIC_KEYS, queue_keys, topic_channel, topic_channel_glob
from ._script import SCRIPT_TEXT, Client
from .errors import FAILURES, RedisUnavailableError

if TYPE_CHECKING:
    from redis.client import PubSub

__all__ = ["LiveSubscription", "Message", "Topics", "TopicsUnavailableError"]

_TOPICS_SCRIPT = importlib.resources.files("redisq").joinpath("topics.lua").read_text("utf-8")

logger = logging.getLogger("redisq")

# How long one read of a live subscriber waits for a message: bounds how late unsubscribe() is
# noticed. Reconnection attempts back off from _READ_SECONDS up to _MAX_BACKOFF_SECONDS.
_READ_SECONDS = 0.05
_MAX_BACKOFF_SECONDS = 1.0
# A connected, idle subscriber reads the publish counter this often, so that ``missed`` after a
# reconnection counts from a recent sequence, not from the last message its pattern matched.
_REFRESH_SECONDS = 1.0
# A subscribed connection that answered nothing (not even the PING an idle one sends every
# _REFRESH_SECONDS) for this long is taken for dead (a half-open TCP connection) and replaced.
_SILENT_SECONDS = 5.0
# How long subscribe() waits for the server to confirm the subscription.
_SUBSCRIBE_SECONDS = 5.0
# Attempts of one publish while other processes keep changing the bindings.
_ROUTE_ATTEMPTS = 16
# Routes kept per version of the bindings: more names than this are matched on every publish.
_ROUTES_KEPT = 10_000
# The keys of a queue a copy touches (topics.lua, publish): meta, ready, payloads, dedup,
# job_ids and seq for a copy with a job id; without one, meta, ready, payloads and seq.
_DEDUP_COPY_KEYS = (0, 1, 2, 7, 8, 9)
_COPY_KEYS = (0, 1, 2, 9)


class _Route(NamedTuple):
    """Where a publish of one name goes (by one version of the bindings)."""

    keys: list[bytes]
    """The keys of a publish into its queues (topics.lua)."""
    head: tuple[bytes, ...]
    """The bindings version routed by, the live subscribers' channel and the name."""
    queues: tuple[bytes, ...]
    """The queues it routes to, sorted."""
    what: str
    """The operation, for errors."""


class _Routing(NamedTuple):
    """One version of the bindings as read from Redis, and the routes worked out by it."""

    version: str
    trie: PatternTrie[str]
    routes: dict[tuple[str, bool], _Route]
    """(name, with message id) -> its route: names are matched once per version."""


class TopicsUnavailableError(RedisUnavailableError):
    """Redis could not be reached, or refused a topics call; the message names the server.

    A :class:`~redisq.RedisUnavailableError`, so one ``except`` covers queues and topics."""


class Message(NamedTuple):
    """One message as a live subscriber receives it."""

    name: str
    """The topic name it was published to."""
    data: Any
    """What was published (decoded from JSON)."""
    message_id: str | None
    """The ``message_id`` given to ``publish``, if any."""


class Topics:
    """The topics of one Redis (``queues.topics()``): ``IStorageTopics`` and ``ILiveTopics``.

    ``close()`` (called by ``Queues.close()``) ends the live subscriptions made through it;
    the bindings stay in Redis.
    """

    def __init__(
        self,
        client: Client,
        where: str,
        clock: Callable[[], int] | None,
        dedup_ttl: float = DEFAULT_TOPIC_DEDUP_TTL,
    ) -> None:
        self._client = client
        self._where = where
        self._clock = clock
        self._subject = f"redisq: {where}: topics"
        # How long a published message id is kept (ms; 0: not kept), as a script argument.
        self._keep_ms = math.ceil(check(self._subject, "dedup_ttl", dedup_ttl) * 1000)
        self._script = client.register_script(_TOPICS_SCRIPT)
        # queue.lua, for the copies of a publish on Redis Cluster (one enqueue per queue).
        self._queue_script = client.register_script(SCRIPT_TEXT)
        self._cluster = isinstance(client, RedisCluster)
        # Guards _copy_keys, _live and _closed.
        self._lock = threading.Lock()
        # The bindings last read (None: never, or found stale), replaced whole, never changed.
        self._routing: _Routing | None = None
        # (queue, with job ids) -> the keys of it a copy touches.
        self._copy_keys: dict[tuple[str, bool], list[str]] = {}
        # Job ids of copies without a message id: a random prefix of this object and a count
        # (Redis Cluster), or the prefix and the publish sequence (one script).
        self._id_prefix = uuid.uuid4().hex[:16]
        self._id_prefix_bytes = self._id_prefix.encode()
        self._id_count = itertools.count()
        self._live: list[LiveSubscription] = []
        self._closed = False

    def __repr__(self) -> str:
        return f"<redisq.Topics of {self._where}>"

    # -- bindings ------------------------------------------------------------------------

    def bind(self, pattern: str, queue: str) -> bool:
        """Route every publish matching ``pattern`` into the queue named ``queue`` (made a
        FIFO queue by the first copy if it was never opened), for every process using this
        Redis; whether the binding is new."""
        check_pattern(pattern)
        check_queue_name(self._subject, queue)
        return bool(
            self._run(f"bind {pattern!r}", TOPIC_KEYS, "topic_bind", _member(pattern, queue))
        )

    def unbind(self, pattern: str, queue: str) -> bool:
        """Remove the binding of ``queue`` under ``pattern``; whether there was one."""
        check_pattern(pattern)
        check_queue_name(self._subject, queue)
        return bool(
            self._run(f"unbind {pattern!r}", TOPIC_KEYS, "topic_unbind", _member(pattern, queue))
        )

    def bindings(self) -> list[tuple[str, str]]:
        """Every binding in this Redis as ``(pattern, queue)``, sorted by pattern, then queue."""
        _, pairs = self._read_routes()
        return sorted(pairs)

    # -- publishing ----------------------------------------------------------------------

    def publish(self, name: str, data: Any, *, message_id: str | None = None) -> int:
        """Store a copy of ``data`` in every bound queue whose pattern matches ``name``, in
        one step with reading the bindings (Redis Cluster: one dedup enqueue per copy); how
        many copies were stored. Live subscribers connected now receive it too."""
        return observe.observed_publish(
            name, message_id, lambda trace: self._publish(name, data, message_id, trace)
        )

    def _publish(
        self, name: str, data: Any, message_id: str | None, trace: dict[str, str] | None
    ) -> int:
        """:meth:`publish`, storing ``trace`` with each copy."""
        routing = self._routing
        dedup = message_id is not None
        # A name routed before was checked then: its route is kept until the bindings change.
        route = None
        if routing is not None and type(name) is str:  # anything else is refused below
            route = routing.routes.get((name, dedup))
        if route is None:
            check_name(name)
        if dedup and (not isinstance(message_id, str) or not message_id):
            raise TypeError(
                f"{self._subject}: message_id must be a non-empty str, got {message_id!r} "
                f"({type(message_id).__name__})"
            )
        copies = _copies(self._subject, name, data, trace)
        data_json = copies.data_json
        if self._cluster:
            live = f"{json.dumps([name, message_id], ensure_ascii=False)[:-1]},{data_json}]"
            live_bytes = live.encode("utf-8", "surrogatepass")
            return self._publish_per_copy(name, check_name(name), message_id, copies, live_bytes)
        data_bytes = data_json.encode()
        for _ in range(_ROUTE_ATTEMPTS):
            if routing is None:
                routing = self._read_routes()[0]
            if route is None:
                route = self._new_route(routing, name, dedup)
            keep = self._keep_ms if message_id else 0
            args = (
                *route.head,
                message_id or b"",
                data_bytes,
                self._id_prefix_bytes,
                keep,
                copies.trace_json.encode(),
            )
            reply = self._run(route.what, route.keys, "publish", *args, *route.queues)
            if reply[0] >= 0:
                return int(reply[0])
            # The bindings changed since we read them: read them again and route again.
            self._routing = routing = route = None
        raise TopicsUnavailableError(
            f"{self._subject}: publish {name!r}: the bindings kept changing while routing it "
            f"({_ROUTE_ATTEMPTS} attempts); retry the publish"
        )

    def _new_route(self, routing: _Routing, name: str, dedup: bool) -> _Route:
        """The route of ``name`` by ``routing``'s bindings, kept in it for the next publish."""
        queues = sorted(set(routing.trie.match(check_name(name))))
        keys = [*TOPIC_KEYS, REGISTRY]
        for queue in queues:
            keys.extend(self._keys_of(queue, dedup))
        # Encoded once here, not by the client on every publish.
        head = tuple(text.encode() for text in (routing.version, topic_channel(name), name))
        route = _Route(
            [key.encode() for key in keys],
            head,
            tuple(queue.encode() for queue in queues),
            f"publish {name!r}",
        )
        if len(routing.routes) < _ROUTES_KEPT:
            routing.routes[(name, dedup)] = route
        return route

    def _publish_per_copy(
        self,
        name: str,
        words: tuple[str, ...],
        message_id: str | None,
        copies: envelope.Copies,
        live: bytes,
    ) -> int:
        """Redis Cluster: unless the message id is kept, announce the publish, store each copy
        by its own dedup enqueue of the same job id, then keep the message id (a publish that
        failed part way keeps none, so its retry completes it)."""
        keep = self._keep_ms if message_id else 0
        if keep and self._run(f"publish {name!r}", TOPIC_KEYS, "topic_seen", message_id or ""):
            return 0
        version, _ = self._run(
            f"publish {name!r}", TOPIC_KEYS, "topic_announce", topic_channel(name), live
        )
        routing = self._routing
        if routing is None or routing.version != _text(version):
            routing = self._read_routes()[0]
        queues = sorted(set(routing.trie.match(words)))
        stored = 0
        for queue in queues:
            keys = queue_keys(queue)
            job_id = copy_id(message_id, queue) if message_id else self._fresh_id()
            payload = copies.of(job_id)
            dedup = job_id if message_id else ""
            what = f"publish {name!r} into queue {queue!r}"
            kind = "fifo"
            args = (0, payload, keys.channel, dedup, 0, 0)
            result = self._run(what, keys.keys, "enqueue", kind, *args, queue_script=True)
            if int(result) == -1:  # a priority queue: its copies get priority 0
                kind = "priority"
                result = self._run(what, keys.keys, "enqueue", kind, *args, queue_script=True)
            if int(result) == 1:
                stored += 1
            try:
                self._client.hsetnx(REGISTRY, queue, kind)
            except FAILURES as exc:
                raise self._unavailable(what, exc) from exc
        if keep:
            self._run(f"publish {name!r}", TOPIC_KEYS, "topic_keep", message_id or "", keep)
        return stored

    def _read_routes(self) -> tuple[_Routing, list[tuple[str, str]]]:
        """Read the bindings (kept for routing) and return them with every binding."""
        reply = self._run("read the bindings", TOPIC_KEYS, "topic_routes")
        pairs: list[tuple[str, str]] = []
        trie: PatternTrie[str] = PatternTrie()
        for member in reply[2:]:
            pattern, queue = json.loads(_text(member))
            pairs.append((pattern, queue))
            trie.add(check_pattern(pattern), queue)
        routing = _Routing(_text(reply[0]), trie, {})
        self._routing = routing
        return routing, pairs

    def _keys_of(self, queue: str, dedup: bool) -> list[str]:
        cached = self._copy_keys.get((queue, dedup))
        if cached is None:
            keys = queue_keys(queue)
            chosen = _DEDUP_COPY_KEYS if dedup else _COPY_KEYS
            cached = [keys.keys[i] for i in chosen]
            with self._lock:
                if len(self._copy_keys) > 10_000:
                    self._copy_keys.clear()
                self._copy_keys[(queue, dedup)] = cached
        return cached

    def _fresh_id(self) -> str:
        """A job id for a copy without a message id, unique across processes."""
        return f"{self._id_prefix}{next(self._id_count):016x}"

    # -- live subscribers ----------------------------------------------------------------

    def subscribe(
        self,
        pattern: str,
        *,
        max_pending: int = 1000,
        on_full: str = "block",
        block_timeout: float | None = None,
    ) -> LiveSubscription:
        """A live subscription to every name ``pattern`` matches, published by any process
        while it is connected (at-most-once). Returns once Redis confirmed the subscription,
        so that what is published afterwards is received."""
        words = check_pattern(pattern)
        if isinstance(max_pending, bool) or not isinstance(max_pending, int):
            raise TypeError(f"{self._subject}: max_pending must be an int, got {max_pending!r}")
        if max_pending < 1:
            raise ValueError(f"{self._subject}: max_pending must be >= 1, got {max_pending}")
        if on_full not in ON_FULL:
            raise ValueError(
                f"{self._subject}: on_full must be one of {', '.join(map(repr, ON_FULL))}, "
                f"got {on_full!r}"
            )
        if block_timeout is not None:
            if isinstance(block_timeout, bool) or not isinstance(block_timeout, (int, float)):
                raise TypeError(
                    f"{self._subject}: block_timeout must be seconds or None, got {block_timeout!r}"
                )
            if not block_timeout >= 0:
                raise ValueError(
                    f"{self._subject}: block_timeout must be >= 0, got {block_timeout!r}"
                )
        with self._lock:
            if self._closed:
                raise TopicsUnavailableError(f"{self._subject}: closed; cannot subscribe")
        live = LiveSubscription(self, pattern, words, max_pending, on_full, block_timeout)
        with self._lock:
            self._live = [s for s in self._live if s.active]
            self._live.append(live)
        return live

    def close(self) -> None:
        """End the live subscriptions made through this object; bindings stay in Redis."""
        with self._lock:
            self._closed = True
            live, self._live = self._live, []
        for subscription in live:
            subscription.unsubscribe()

    # -- Redis ---------------------------------------------------------------------------

    def _run(
        self,
        what: str,
        keys: Sequence[str | bytes],
        command: str,
        *args: bytes | str | int,
        queue_script: bool = False,
    ) -> Any:
        """Run ``command`` of topics.lua (``queue_script``: of queue.lua) on ``keys``."""
        if self._closed:  # a plain read: close() sets it once, under the lock
            raise TopicsUnavailableError(f"{self._subject}: closed; cannot {what}")
        now = "" if self._clock is None else str(int(self._clock()))
        script = self._queue_script if queue_script else self._script
        try:
            return script(keys=keys, args=(command, now, *args))
        except FAILURES as exc:
            raise self._unavailable(what, exc) from exc

    def _unavailable(self, what: str, exc: BaseException) -> TopicsUnavailableError:
        return TopicsUnavailableError(
            f"{self._subject}: cannot {what}: Redis at {self._where} failed "
            f"({type(exc).__name__}: {exc})"
        )

    def _published(self) -> int:
        """The publish counter now (raises RedisError or OSError)."""
        value = self._client.get(TOPIC_KEYS[2])
        return 0 if value is None else int(value)

    def _pubsub(self) -> PubSub:
        """A new pub/sub connection (Redis Cluster: to any node; PUBLISH reaches them all)."""
        client = self._client
        if isinstance(client, RedisCluster):
            node = client.get_random_node()  # type: ignore[no-untyped-call]
            client = client.get_redis_connection(node)
        # Any: redis-py annotates pubsub() in some releases (8.2) and not in others (8.1).
        untyped: Any = client
        pubsub: PubSub = untyped.pubsub()
        return pubsub


class LiveSubscription:
    """A live subscriber of the topics of one Redis (``ILiveSubscription``): iterate it, sync
    or async, for each :class:`Message` whose name its pattern matches.

    A thread of its own (``redisq:topics``) reads its pub/sub connection into a buffer of at
    most ``max_pending`` messages. When the buffer is full, ``on_full`` says what happens to
    the next message: ``"drop_oldest"`` and ``"drop_newest"`` drop one, counted in
    ``dropped``; ``"block"`` stops reading until a reader makes room, for up to
    ``block_timeout`` seconds (``None``: as long as it takes), then drops it, counted in
    ``dropped`` too. Publishers never wait for it: Redis holds what it has not read yet.
    """

    def __init__(
        self,
        topics: Topics,
        pattern: str,
        words: tuple[str, ...],
        max_pending: int,
        on_full: str,
        block_timeout: float | None,
    ) -> None:
        self._topics = topics
        self._pattern = pattern
        self._words = words
        self._glob = topic_channel_glob(words)
        self._max_pending = max_pending
        self._on_full = on_full
        self._block_timeout = block_timeout
        # Guards everything below; notified when a message arrives, room is made, the
        # connection comes or goes, or the subscription ends.
        self._cond = threading.Condition()
        self._items: deque[Message] = deque()
        self._async_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._active = True
        self._connected = False
        self._dropped = 0
        self._missed = 0
        self._reconnects = 0
        self._last_sequence = 0  # the last publish sequence it knows it did not miss
        pubsub = self._connect_first()
        self._thread = threading.Thread(
            target=self._run, args=(pubsub,), name="redisq:topics", daemon=True
        )
        self._thread.start()

    # -- what a reader sees --------------------------------------------------------------

    @property
    def pattern(self) -> str:
        """The pattern it subscribed with."""
        return self._pattern

    @property
    def active(self) -> bool:
        """Whether it still receives publishes (False after :meth:`unsubscribe`)."""
        return self._active

    @property
    def connected(self) -> bool:
        """Whether its connection to Redis is up and subscribed now."""
        return self._connected

    @property
    def dropped(self) -> int:
        """Messages its full buffer dropped (by ``on_full``)."""
        return self._dropped

    @property
    def missed(self) -> int:
        """An upper bound of the publishes it may have missed while disconnected."""
        return self._missed

    @property
    def reconnects(self) -> int:
        """How often it reconnected and subscribed again."""
        return self._reconnects

    def __len__(self) -> int:
        """Messages waiting in its buffer."""
        return len(self._items)

    def get(self, timeout: float | None = None) -> Message | None:
        """The next message, waiting up to ``timeout`` seconds (``None``: until one comes or
        it is unsubscribed); ``None`` if none came."""
        with self._cond:
            if not self._cond.wait_for(lambda: self._items or not self._active, timeout):
                return None
            return self._pop_locked()

    async def get_async(self, timeout: float | None = None) -> Message | None:
        """:meth:`get` without blocking the event loop."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._cond:
                if self._items or not self._active:
                    return self._pop_locked()
                future: asyncio.Future[None] = loop.create_future()
                self._async_waiters.append((loop, future))
            remaining = None if deadline is None else deadline - time.monotonic()
            try:
                if remaining is None or remaining > 0:
                    await asyncio.wait({future}, timeout=remaining)
            finally:
                with self._cond, contextlib.suppress(ValueError):
                    self._async_waiters.remove((loop, future))
            if deadline is not None and time.monotonic() >= deadline:
                with self._cond:
                    return self._pop_locked()

    def unsubscribe(self) -> bool:
        """Stop receiving; whether it was subscribed. Messages already buffered are still
        read; then iteration ends."""
        with self._cond:
            if not self._active:
                return False
            self._active = False
            self._wake_locked()
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=5.0)
        return True

    def __iter__(self) -> LiveSubscription:
        return self

    def __next__(self) -> Message:
        message = self.get(None)
        if message is None:
            raise StopIteration
        return message

    def __aiter__(self) -> LiveSubscription:
        return self

    async def __anext__(self) -> Message:
        message = await self.get_async(None)
        if message is None:
            raise StopAsyncIteration
        return message

    def __enter__(self) -> LiveSubscription:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.unsubscribe()

    def __repr__(self) -> str:
        state = "active" if self._active else "unsubscribed"
        return f"<redisq.LiveSubscription on {self._pattern!r}, {state}, {len(self)} pending>"

    def _pop_locked(self) -> Message | None:
        if not self._items:
            return None
        message = self._items.popleft()
        self._cond.notify_all()  # the reader thread may wait for room
        return message

    def _wake_locked(self) -> None:
        self._cond.notify_all()
        waiting, self._async_waiters = self._async_waiters, []
        for loop, future in waiting:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody to wake
                loop.call_soon_threadsafe(_resolve, future)

    # -- the reader thread ---------------------------------------------------------------

    def _connect_first(self) -> PubSub:
        """Subscribe, wait for the server's confirmation, and read the publish counter;
        raise :class:`TopicsUnavailableError` if Redis does not answer."""
        topics = self._topics
        pubsub: PubSub | None = None
        try:
            pubsub = topics._pubsub()
            pubsub.psubscribe(self._glob)
            deadline = time.monotonic() + _SUBSCRIBE_SECONDS
            while True:
                message = pubsub.get_message(timeout=_READ_SECONDS)
                if message is not None and message.get("type") == "psubscribe":
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"no confirmation of the subscription to {self._glob!r}")
            self._last_sequence = topics._published()
        except FAILURES as exc:
            _close_quietly(pubsub)
            raise topics._unavailable(f"subscribe to {self._pattern!r}", exc) from exc
        self._connected = True
        return pubsub

    def _run(self, pubsub: PubSub | None) -> None:
        topics = self._topics
        backoff = _READ_SECONDS
        check_missed = False  # reconnected: read the publish counter for ``missed``
        refreshed_at = heard_at = time.monotonic()
        pending_sequence: int | None = None  # read while connected, applied once drained
        while self._active:
            try:
                if pubsub is None:
                    pubsub = topics._pubsub()
                    pubsub.psubscribe(self._glob)
                    heard_at = time.monotonic()
                if check_missed:
                    now_sequence = topics._published()
                    with self._cond:
                        self._missed += max(0, now_sequence - self._last_sequence)
                        self._last_sequence = max(self._last_sequence, now_sequence)
                    check_missed = False
                message = pubsub.get_message(timeout=_READ_SECONDS)
                if message is None:
                    if pending_sequence is not None:  # nothing before it is left unread
                        with self._cond:
                            self._last_sequence = max(self._last_sequence, pending_sequence)
                        pending_sequence = None
                    now = time.monotonic()
                    if now - heard_at > _SILENT_SECONDS:
                        raise TimeoutError(
                            f"no answer on the subscribed connection for {_SILENT_SECONDS:g} s"
                        )
                    if self._connected and now - refreshed_at > _REFRESH_SECONDS:
                        pending_sequence = topics._published()
                        pubsub.ping()  # answered by a "pong" message: the connection lives
                        refreshed_at = now
                    continue
                heard_at = time.monotonic()
                backoff = _READ_SECONDS
                kind = message.get("type")
                if kind == "psubscribe":
                    # The first confirmation was read at subscribe: every one here follows a
                    # new connection (ours, or one the client library made on its own).
                    with self._cond:
                        self._connected = True
                        self._reconnects += 1
                        self._cond.notify_all()
                    check_missed = True
                elif kind == "pmessage":
                    self._receive(message.get("data"))
            except FAILURES as exc:
                _close_quietly(pubsub)
                pubsub = None
                pending_sequence = None
                with self._cond:
                    if self._connected:
                        logger.warning(
                            "redisq: live subscriber of %r lost its connection to %s (%s: %s); "
                            "reconnecting",
                            self._pattern,
                            topics._where,
                            type(exc).__name__,
                            exc,
                        )
                    self._connected = False
                    self._cond.notify_all()
                    self._cond.wait_for(lambda: not self._active, backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_SECONDS)
        _close_quietly(pubsub)
        with self._cond:
            self._connected = False
            self._wake_locked()

    def _receive(self, raw: Any) -> None:
        """Buffer one published message if the pattern matches its name."""
        text = raw.decode("utf-8", "surrogatepass") if isinstance(raw, bytes) else str(raw)
        head, _, body = text.partition(" ")
        try:
            sequence = int(head)
            name, message_id, data = json.loads(body)
        except ValueError:
            logger.warning(
                "redisq: live subscriber of %r: a message not from redisq ignored", self._pattern
            )
            return
        with self._cond:
            self._last_sequence = max(self._last_sequence, sequence)
            if not matches(self._words, name.split(".")):
                return
            self._put_locked(Message(name, data, message_id))

    def _put_locked(self, message: Message) -> None:
        if len(self._items) >= self._max_pending:
            if self._on_full == "drop_newest":
                self._dropped += 1
                return
            if self._on_full == "drop_oldest":
                self._items.popleft()
                self._dropped += 1
            elif not self._cond.wait_for(
                lambda: len(self._items) < self._max_pending or not self._active,
                self._block_timeout,
            ):
                self._dropped += 1
                return
            if not self._active:
                return
        self._items.append(message)
        self._wake_locked()


def _member(pattern: str, queue: str) -> str:
    return json.dumps([pattern, queue], ensure_ascii=False)


def _copies(subject: str, name: str, data: Any, trace: dict[str, str] | None) -> envelope.Copies:
    """The envelopes of the copies of ``data`` (with the publish's trace context, if any);
    ``TypeError`` when it cannot be stored."""
    try:
        return envelope.Copies(data, trace)
    except TypeError as exc:
        raise TypeError(f"{subject}: publish to {name!r}: {exc}") from None


def _text(value: Any) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _close_quietly(pubsub: PubSub | None) -> None:
    if pubsub is None:
        return
    with contextlib.suppress(*FAILURES):
        pubsub.close()
