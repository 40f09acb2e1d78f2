"""``redisq.new``, ``redisq.open_url`` and ``Queues``: one Redis connection, the queues opened
on it, closing them."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeVar
from urllib.parse import urlsplit

import redis
from redis.backoff import ExponentialBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError
from redis.retry import Retry

from varmq.contract.protocols import DEFAULT_TOPIC_DEDUP_TTL
from varmq.contract.rules import QueueOptions, check_name, queue_settings
from varmq.contract.stored_settings import encode, settle
from varmq.contract.workers import WorkerInfo, worker_infos

from ._distributed import DistributedPriorityQueue, DistributedQueue
from ._health import Health
from ._keys import REGISTRY, queue_keys
from ._location import describe, redact
from ._pubsub import Listener
from ._queue import PRIORITY, PriorityQueue, Queue, _StoredQueue
from ._script import FAILED, Client, ScriptRunner
from ._topics import Topics
from ._workers import WorkerRegistry
from .errors import FAILURES, EvictionPolicyError, RedisUnavailableError

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_RETRIES",
    "DEFAULT_SOCKET_TIMEOUT",
    "URL_SCHEMES",
    "EvictionPolicyError",
    "QueueKindError",
    "Queues",
    "RedisUnavailableError",
    "UnknownQueueError",
    "new",
    "open_url",
]

URL_SCHEMES = ("redis", "rediss", "unix")
"""The URL schemes :func:`new` and :func:`open_url` take."""


# For clients redisq creates: a call with Redis gone or frozen raises within a bounded time
# (docs/redisq.md, "Errors and timeouts"), and a command is retried once, briefly, so that a
# pooled connection that died with a Redis restart is replaced without an error. A retried call
# whose first attempt did reach Redis can store an enqueue twice (enqueue_dedup cannot) or
# report an ack as False although it was done; at-least-once delivery allows both.
DEFAULT_CONNECT_TIMEOUT: Final = 1.0
"""Seconds to open a connection (``socket_connect_timeout``)."""
DEFAULT_SOCKET_TIMEOUT: Final = 2.0
"""Seconds to wait for one reply (``socket_timeout``)."""
DEFAULT_RETRIES: Final = 1
"""Retries of a command that failed on its connection (``retries``)."""
MAX_TIMEOUT: Final = 3600.0
MAX_RETRIES: Final = 10
_BACKOFF = {"cap": 0.25, "base": 0.02}


def _seconds(option: str, value: object) -> float:
    problem = f"redisq: {option}={value!r}; expected seconds > 0, at most {MAX_TIMEOUT:g}"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(problem)
    if not (math.isfinite(value) and 0 < value <= MAX_TIMEOUT):
        raise ValueError(problem)
    return float(value)


def _retries(value: object) -> int:
    problem = f"redisq: retries={value!r}; expected an int from 0 to {MAX_RETRIES}"
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(problem)
    if not 0 <= value <= MAX_RETRIES:
        raise ValueError(problem)
    return value


@dataclass(frozen=True)
class _Connection:
    """The checked connection options of a URL client."""

    connect_timeout: float
    socket_timeout: float
    retries: int

    def client_options(self) -> dict[str, object]:
        return {
            "socket_connect_timeout": self.connect_timeout,
            "socket_timeout": self.socket_timeout,
            "retry": Retry(ExponentialBackoff(**_BACKOFF), retries=self.retries),
        }

    @property
    def subscribe_seconds(self) -> float:
        """How long ``subscribe`` waits for the server to confirm: one connect, one reply."""
        return self.connect_timeout + self.socket_timeout


_Q = TypeVar("_Q", bound=_StoredQueue)
_T = TypeVar("_T")
logger = logging.getLogger("redisq")


class QueueKindError(ValueError):
    """A queue name is opened as a FIFO queue while it exists as a priority queue, or back."""


class UnknownQueueError(LookupError):
    """``Queues.open_queue`` was given a name no ``Queues`` ever created in this Redis."""


def new(
    url_or_client: str | Client,
    *,
    clock: Callable[[], int] | None = None,
    socket_connect_timeout: float | None = None,
    socket_timeout: float | None = None,
    retries: int | None = None,
    check_eviction: bool = True,
) -> Queues:
    """Connect to Redis and return the factory of its queues.

    ``url_or_client`` is a ``redis://``, ``rediss://`` or ``unix://`` URL (user, password, db
    and redis-py options in the query string), or an existing ``redis.Redis`` or
    ``redis.cluster.RedisCluster`` created with ``decode_responses=False``; a client passed in
    stays open after :meth:`Queues.close`. ``clock`` returns the time in integer milliseconds
    for lease deadlines; by default the Redis server's clock is used, so that hosts whose
    clocks disagree still agree on when a lease expires.

    For a URL, ``socket_connect_timeout`` (default 1 s), ``socket_timeout`` (default 2 s) and
    ``retries`` (default 1) bound how long a call can block before it raises
    :class:`RedisUnavailableError` (a query parameter of the same name in the URL wins); a
    client passed in keeps its own, and giving them with one raises ``ValueError``.
    ``check_eviction``: the first queue opened checks that Redis never evicts keys (see
    :class:`EvictionPolicyError`); ``False`` skips that, for a managed Redis that refuses
    ``CONFIG GET`` (logged as a warning).
    """
    if not isinstance(check_eviction, bool):
        raise TypeError(f"redisq: check_eviction={check_eviction!r}; expected True or False")
    given = {
        name: value
        for name, value in (
            ("socket_connect_timeout", socket_connect_timeout),
            ("socket_timeout", socket_timeout),
            ("retries", retries),
        )
        if value is not None
    }
    connection = _Connection(
        _seconds(
            "socket_connect_timeout", given.get("socket_connect_timeout", DEFAULT_CONNECT_TIMEOUT)
        ),
        _seconds("socket_timeout", given.get("socket_timeout", DEFAULT_SOCKET_TIMEOUT)),
        _retries(given.get("retries", DEFAULT_RETRIES)),
    )
    if isinstance(url_or_client, str):
        where = redact(url_or_client)
        if urlsplit(url_or_client).scheme not in URL_SCHEMES:
            raise ValueError(
                f"redisq: cannot connect to {where!r}: the URL must start with redis://, "
                "rediss:// or unix://"
            )
        client: Client = redis.Redis.from_url(url_or_client, **connection.client_options())
        return Queues(
            client,
            owns_client=True,
            where=where,
            clock=clock,
            subscribe_seconds=connection.subscribe_seconds,
            check_eviction=check_eviction,
        )
    if not isinstance(url_or_client, (redis.Redis, RedisCluster)):
        raise TypeError(
            "redisq.new() takes a redis:// URL, a redis.Redis or a redis.cluster.RedisCluster, "
            f"not {type(url_or_client).__name__}"
        )
    if given:
        raise ValueError(
            f"redisq: {', '.join(given)} apply to a client redisq creates from a URL; set them "
            "on the redis.Redis or RedisCluster you pass in"
        )
    if url_or_client.get_encoder().decode_responses:
        raise ValueError(
            "redisq: the Redis client decodes responses to str; job payloads are bytes, so "
            "create it with decode_responses=False"
        )
    return Queues(
        url_or_client,
        owns_client=False,
        where=describe(url_or_client),
        clock=clock,
        subscribe_seconds=DEFAULT_CONNECT_TIMEOUT + DEFAULT_SOCKET_TIMEOUT,
        check_eviction=check_eviction,
    )


def open_url(
    url: str,
    *,
    socket_connect_timeout: float | None = None,
    socket_timeout: float | None = None,
    retries: int | None = None,
    check_eviction: bool = True,
) -> Queues:
    """Like :func:`new` with a URL, but check at once that Redis answers, for operator tools.

    Sends a PING, then checks the eviction policy (unless ``check_eviction=False``); raises
    :class:`RedisUnavailableError` (a ``ConnectionError``) naming the URL without its password
    when Redis cannot be reached or refuses the credentials, :class:`EvictionPolicyError` when
    Redis may evict keys, and ``ValueError`` for a URL that is not a Redis URL. The keyword
    options are those of :func:`new`.
    """
    queues = new(
        url,
        socket_connect_timeout=socket_connect_timeout,
        socket_timeout=socket_timeout,
        retries=retries,
        check_eviction=check_eviction,
    )
    try:
        queues._client.ping()
    except redis.AuthenticationError as exc:
        queues.close()
        raise RedisUnavailableError(
            f"redisq: Redis at {queues.location} refused the credentials ({exc})"
        ) from exc
    except FAILURES as exc:
        queues.close()
        raise RedisUnavailableError(
            f"redisq: ping: Redis at {queues.location} is unreachable ({type(exc).__name__}: {exc})"
        ) from exc
    try:
        queues._check_eviction()
    except BaseException:
        queues.close()
        raise
    return queues


class Queues:
    """Opens queues on one Redis connection; :meth:`close` closes them and what it opened."""

    def __init__(
        self,
        client: Client,
        *,
        owns_client: bool,
        where: str,
        clock: Callable[[], int] | None,
        subscribe_seconds: float = DEFAULT_CONNECT_TIMEOUT + DEFAULT_SOCKET_TIMEOUT,
        check_eviction: bool = True,
    ) -> None:
        self._client = client
        self._owns_client = owns_client
        self._health = Health(where)
        self._runner = ScriptRunner(client, self._health, clock)
        self._listener = Listener(client, self._health, subscribe_seconds)
        self._workers = WorkerRegistry(client, self._health, clock)  # of every process
        # Set once the eviction policy was checked (or the check is off); read without the
        # lock: two threads opening the first queues at once both check, which is harmless.
        self._eviction_checked = not check_eviction
        if not check_eviction:
            logger.warning(
                "redisq: check_eviction=False: not checking that Redis at %s never evicts "
                "keys; with a maxmemory-policy other than noeviction it can drop jobs",
                where,
            )
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

        ``options``: :class:`~varmq.contract.rules.QueueOptions`. Raises :class:`QueueKindError` if
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
        written when a queue is opened; :class:`RedisUnavailableError` when Redis cannot be
        reached.
        """
        stored = self._call("list_queues", "", lambda: self._client.hgetall(REGISTRY))
        return sorted((_decode(name), _decode(kind)) for name, kind in stored.items())

    def open_queue(
        self, name: str, **options: Unpack[QueueOptions]
    ) -> DistributedQueue | DistributedPriorityQueue:
        """Open the existing queue ``name`` as its own kind, in its distributed variant.

        ``options`` are those of :meth:`new_queue`. Raises :class:`UnknownQueueError` naming
        the queue when no queue of that name was ever opened in this Redis.
        """
        check_name(f"redisq: {self.location}", name)
        kind = self._call("open_queue", name, lambda: self._client.hget(REGISTRY, name))
        if kind is None:
            raise UnknownQueueError(
                f"redisq: no queue named {name!r} in {self.location}; "
                "list_queues() shows the existing ones"
            )
        if _decode(kind) == PRIORITY:
            return self._open(DistributedPriorityQueue, name, options, offer=False)
        return self._open(DistributedQueue, name, options, offer=False)

    def topics(self, *, dedup_ttl: float = DEFAULT_TOPIC_DEDUP_TTL) -> Topics:
        """The topic bindings of this Redis, publishing into bound queues, and live
        subscribers (see :mod:`redisq._topics`); every process using this Redis shares them.

        ``dedup_ttl``: seconds a ``message_id`` this object publishes is kept in Redis, so that
        a publish of it again within that time, by any process, stores nothing (default one
        day; 0: only while its copies are stored)."""
        topics = Topics(self._client, self.location, self._runner._clock, dedup_ttl)
        with self._lock:
            if self._closed:
                raise RuntimeError("redisq: cannot open topics: Queues is closed")
            self._topics.append(topics)
        return topics

    def workers(self) -> list[WorkerInfo]:
        """Every worker, of any process, consuming a queue of this Redis: living ones first,
        then those gone (killed, or cut off) for less than an hour, with ``alive=False``;
        decided on the server's clock. :class:`RedisUnavailableError` when Redis cannot be
        reached; ``[]`` once closed."""
        return worker_infos(self._workers.worker_records())

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
        self._workers.closed = True
        if self._owns_client:
            self._client.close()

    def _open(
        self, cls: type[_Q], name: str, options: Mapping[str, Any], *, offer: bool = True
    ) -> _Q:
        """The one opener: check the name and options, check the stored kind, settle the
        defining settings (stored here when ``offer`` and none are stored yet), remember the
        queue for close()."""
        check_name(f"redisq: {self.location}", name)
        subject = f"redisq: queue {name!r} on {self.location}"
        offered = queue_settings(subject, options)
        self._check_open(name)
        self._check_eviction()
        offer_text = encode(offered) if offer else ""
        answer = self._runner.run(name, queue_keys(name).keys, "open", cls.KIND, offer_text)
        if answer is FAILED:  # Queues was closed meanwhile
            raise RuntimeError(f"redisq: cannot open queue {name!r}: Queues is closed")
        kind, stored = _decode(answer[0]), answer[1] or None
        if kind != cls.KIND:
            opener = "new_priority_queue" if kind == PRIORITY else "new_queue"
            raise QueueKindError(
                f"redisq: queue {name!r} exists as a {kind} queue, not {cls.KIND}; "
                f"open it with {opener}() (or the distributed variant) or use another name"
            )
        self._register(name, kind)
        queue = cls(name, self._runner, self._listener, settle(subject, options, offered, stored))
        queue.worker_registry = self._workers
        with self._lock:
            closed = self._closed
            if not closed:
                self._queues.append(queue)
        if closed:
            queue.close()
            self._check_open(name)
        return queue

    def _check_open(self, name: str) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError(f"redisq: cannot open queue {name!r}: Queues is closed")

    def _register(self, name: str, kind: str) -> None:
        """Record the queue in the registry for list_queues() (idempotent)."""
        self._call("register", name, lambda: self._client.hsetnx(REGISTRY, name, kind))

    def _call(self, operation: str, queue: str, call: Callable[[], _T]) -> _T:
        """``call()``, a Redis command; :class:`RedisUnavailableError` when it fails."""
        try:
            result = call()
        except FAILURES as exc:
            raise self._health.failed(queue, operation, exc) from exc
        self._health.ok()
        return result

    def _check_eviction(self) -> None:
        """Refuse a Redis that may evict keys (once per ``Queues``), as the module says."""
        if self._eviction_checked:
            return
        policies = self._eviction_policies()
        evicting = sorted({policy for policy in policies if policy != "noeviction"})
        if evicting:
            raise EvictionPolicyError(
                f"redisq: Redis at {self.location} has maxmemory-policy "
                f"{', '.join(evicting)}: it may evict the keys of queued jobs when memory runs "
                "short, and those jobs would vanish. Fix it on the server with "
                "CONFIG SET maxmemory-policy noeviction (and in redis.conf), or pass "
                "check_eviction=False if you accept that risk"
            )
        self._eviction_checked = True

    def _eviction_policies(self) -> list[str]:
        """``maxmemory-policy`` of the server (of every primary of a cluster)."""
        client = self._client
        found: list[Any]
        try:
            if isinstance(client, RedisCluster):
                answers: Any = client.config_get(
                    "maxmemory-policy", target_nodes=RedisCluster.PRIMARIES
                )
                found = list(answers.values()) if _per_node(answers) else [answers]
            else:
                found = [client.config_get("maxmemory-policy")]
        except ResponseError as exc:
            raise EvictionPolicyError(
                f"redisq: Redis at {self.location} refused CONFIG GET maxmemory-policy "
                f"({exc}), so redisq cannot check that it never evicts the keys of queued "
                "jobs; make sure its maxmemory-policy is noeviction and pass "
                "check_eviction=False (a managed Redis that disables CONFIG needs that)"
            ) from exc
        except FAILURES as exc:
            raise self._health.failed("", "CONFIG GET maxmemory-policy", exc) from exc
        self._health.ok()
        policies = []
        for answer in found:
            value = dict(answer).get("maxmemory-policy", dict(answer).get(b"maxmemory-policy"))
            policies.append(_decode(value) if value is not None else "noeviction")
        return policies


def _per_node(answers: Any) -> bool:
    """Whether a cluster CONFIG GET answer is keyed by node (several nodes answered)."""
    return bool(answers) and all(isinstance(value, dict) for value in answers.values())


def _decode(value: bytes | str) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else value
