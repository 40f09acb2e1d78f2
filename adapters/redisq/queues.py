"""``redisq.new``, ``redisq.open_url`` and ``Queues``: one Redis connection, the queues opened
on it, closing them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.exceptions import RedisError
from redis.retry import Retry

from redisq.checks import QueueOptions, check_name, queue_settings
from redisq.distributed import DistributedPriorityQueue, DistributedQueue
from redisq.health import Health
from redisq.keys import REGISTRY
from redisq.location import describe, redact
from redisq.pubsub import Listener
from redisq.queue import PRIORITY, PriorityQueue, Queue, _StoredQueue
from redisq.script import Client, ScriptRunner
from redisq.topics import Topics

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "URL_SCHEMES",
    "QueueKindError",
    "Queues",
    "RedisUnavailableError",
    "UnknownQueueError",
    "new",
    "open_url",
]

URL_SCHEMES = ("redis", "rediss", "unix")
"""The URL schemes :func:`new` and :func:`open_url` take."""


# For clients redisq creates: fail fast when Redis is down, and retry a command twice, briefly,
# so a pooled connection that died with a Redis restart is replaced without an error. A retried
# call whose first attempt did reach Redis can store an enqueue twice (enqueue_dedup cannot)
# or report an ack as False although it was done; at-least-once delivery allows both.
def _client_options() -> dict[str, object]:
    return {
        "socket_connect_timeout": 5.0,
        "socket_timeout": 30.0,
        "retry": Retry(ExponentialBackoff(cap=0.25, base=0.02), retries=2),
    }


_Q = TypeVar("_Q", bound=_StoredQueue)


class QueueKindError(ValueError):
    """A queue name is opened as a FIFO queue while it exists as a priority queue, or back."""


class UnknownQueueError(LookupError):
    """``Queues.open_queue`` was given a name no ``Queues`` ever created in this Redis."""


class RedisUnavailableError(ConnectionError):
    """:func:`open_url` could not reach Redis, or Redis refused the credentials."""


def new(url_or_client: str | Client, *, clock: Callable[[], int] | None = None) -> Queues:
    """Connect to Redis and return the factory of its queues.

    ``url_or_client`` is a ``redis://``, ``rediss://`` or ``unix://`` URL (user, password, db
    and redis-py options in the query string), or an existing ``redis.Redis`` or
    ``redis.cluster.RedisCluster`` created with ``decode_responses=False``; a client passed in
    stays open after :meth:`Queues.close`. ``clock`` returns the time in integer milliseconds
    for lease deadlines; by default the Redis server's clock is used, so that hosts whose
    clocks disagree still agree on when a lease expires.
    """
    if isinstance(url_or_client, str):
        where = redact(url_or_client)
        if urlsplit(url_or_client).scheme not in URL_SCHEMES:
            raise ValueError(
                f"redisq: cannot connect to {where!r}: the URL must start with redis://, "
                "rediss:// or unix://"
            )
        client: Client = redis.Redis.from_url(url_or_client, **_client_options())
        return Queues(client, owns_client=True, where=where, clock=clock)
    if not isinstance(url_or_client, (redis.Redis, RedisCluster)):
        raise TypeError(
            "redisq.new() takes a redis:// URL, a redis.Redis or a redis.cluster.RedisCluster, "
            f"not {type(url_or_client).__name__}"
        )
    if url_or_client.get_encoder().decode_responses:
        raise ValueError(
            "redisq: the Redis client decodes responses to str; job payloads are bytes, so "
            "create it with decode_responses=False"
        )
    return Queues(url_or_client, owns_client=False, where=describe(url_or_client), clock=clock)


def open_url(url: str) -> Queues:
    """Like :func:`new` with a URL, but check at once that Redis answers, for operator tools.

    Sends a PING; raises :class:`RedisUnavailableError` (a ``ConnectionError``) naming the URL
    without its password when Redis cannot be reached or refuses the credentials, and
    ``ValueError`` for a URL that is not a Redis URL.
    """
    queues = new(url)
    try:
        queues._client.ping()
    except redis.AuthenticationError as exc:
        queues.close()
        raise RedisUnavailableError(
            f"redisq: Redis at {queues.location} refused the credentials ({exc})"
        ) from None
    except (RedisError, OSError) as exc:
        queues.close()
        raise RedisUnavailableError(
            f"redisq: Redis at {queues.location} is unreachable ({type(exc).__name__}: {exc})"
        ) from None
    return queues


class Queues:
    """Opens queues on one Redis connection; :meth:`close` closes them and what it opened."""

    def __init__(
        self, client: Client, *, owns_client: bool, where: str, clock: Callable[[], int] | None
    ) -> None:
        self._client = client
        self._owns_client = owns_client
        self._health = Health(where)
        self._runner = ScriptRunner(client, self._health, clock)
        self._listener = Listener(client, self._health)
        # Protects _queues and _closed: every queue opened here, closed together by close().
        self._lock = threading.Lock()
        self._queues: list[_StoredQueue] = []
        self._topics: list[Topics] = []
        self._closed = False

    def __repr__(self) -> str:
        return f"<redisq.Queues {self.location}{' closed' if self._closed else ''}>"

    def __enter__(self) -> Queues:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def location(self) -> str:
        """Where the queues are, for messages: the URL without its password, or the client's
        host, port and database."""
        return self._health.where

    def new_queue(self, name: str, **options: Unpack[QueueOptions]) -> Queue:
        """Open the FIFO queue ``name`` (created on first enqueue).

        ``options``: :class:`~redisq.checks.QueueOptions`. Raises :class:`QueueKindError` if
        ``name`` is a priority queue.
        """
        return self._open(Queue, name, options)

    def new_priority_queue(self, name: str, **options: Unpack[QueueOptions]) -> PriorityQueue:
        """Open the priority queue ``name``: lower numbers first, FIFO among equals."""
        return self._open(PriorityQueue, name, options)

    def new_distributed_queue(self, name: str, **options: Unpack[QueueOptions]) -> DistributedQueue:
        """Open the FIFO queue ``name`` for processes on several hosts, with notifications."""
        return self._open(DistributedQueue, name, options)

    def new_distributed_priority_queue(
        self, name: str, **options: Unpack[QueueOptions]
    ) -> DistributedPriorityQueue:
        """Open the priority queue ``name`` for processes on several hosts, with notifications."""
        return self._open(DistributedPriorityQueue, name, options)

    def list_queues(self) -> list[tuple[str, str]]:
        """``(name, kind)`` of every queue ever opened in this Redis, sorted by name.

        ``kind`` is ``"fifo"`` or ``"priority"``. Read from one registry key (``redisq:queues``)
        written when a queue is opened; ``RedisError`` when Redis cannot be reached.
        """
        stored = self._client.hgetall(REGISTRY)
        return sorted((_decode(name), _decode(kind)) for name, kind in stored.items())

    def open_queue(
        self, name: str, **options: Unpack[QueueOptions]
    ) -> DistributedQueue | DistributedPriorityQueue:
        """Open the existing queue ``name`` as its own kind, in its distributed variant.

        ``options`` are those of :meth:`new_queue`. Raises :class:`UnknownQueueError` naming
        the queue when no queue of that name was ever opened in this Redis.
        """
        kind = self._client.hget(REGISTRY, check_name(f"redisq: {self.location}", name))
        if kind is None:
            raise UnknownQueueError(
                f"redisq: no queue named {name!r} in {self.location}; "
                "list_queues() shows the existing ones"
            )
        if _decode(kind) == PRIORITY:
            return self._open(DistributedPriorityQueue, name, options)
        return self._open(DistributedQueue, name, options)

    def topics(self) -> Topics:
        """The topic bindings of this Redis, publishing into bound queues, and live
        subscribers (see :mod:`redisq.topics`); every process using this Redis shares them."""
        topics = Topics(self._client, self.location, self._runner._clock)
        with self._lock:
            if self._closed:
                raise RuntimeError("redisq: cannot open topics: Queues is closed")
            self._topics.append(topics)
        return topics

    def close(self) -> None:
        """Close every queue opened here, stop the pub/sub thread, and close a client we made.

        Afterwards no queue of this ``Queues`` reaches Redis, acknowledgements included.
        """
        with self._lock:
            if self._closed:
                return
            self._closed = True
            queues, self._queues = self._queues, []
            topics, self._topics = self._topics, []
        for queue in queues:
            queue.close()
        for opened in topics:
            opened.close()
        self._listener.close()
        self._runner.closed = True
        if self._owns_client:
            self._client.close()

    def _open(self, cls: type[_Q], name: str, options: Mapping[str, Any]) -> _Q:
        """The one opener: check the name and options, check the stored kind, remember the
        queue for close()."""
        check_name(f"redisq: {self.location}", name)
        settings = queue_settings(f"redisq: queue {name!r} on {self.location}", options)
        queue = cls(name, self._runner, self._listener, settings)
        with self._lock:
            if self._closed:
                raise RuntimeError(f"redisq: cannot open queue {name!r}: Queues is closed")
            self._queues.append(queue)
        kind = queue.stored_kind()
        # None: Redis is unreachable (already logged); every enqueue checks the kind again.
        if kind is not None and kind != queue.KIND:
            with self._lock:
                self._queues.remove(queue)
            opener = "new_priority_queue" if kind == PRIORITY else "new_queue"
            raise QueueKindError(
                f"redisq: queue {name!r} exists as a {kind} queue, not {queue.KIND}; "
                f"open it with {opener}() (or the distributed variant) or use another name"
            )
        if kind is not None:
            self._register(name, kind)
        return queue

    def _register(self, name: str, kind: str) -> None:
        """Record the queue in the registry for list_queues(); a failure is only logged."""
        try:
            self._client.hsetnx(REGISTRY, name, kind)
        except (RedisError, OSError) as exc:
            self._health.failed(name, "register", exc)


def _decode(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value
