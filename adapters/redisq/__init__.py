"""redisq: Redis storage for varmq.

``redisq.new(url_or_client)`` returns :class:`Queues` (``redisq.open_url(url)`` does too, after
checking that Redis answers), which opens FIFO, priority and distributed queues. They implement the
varmq storage protocols structurally (of varmq, this package imports only :mod:`varmq.contract`: its
rules, envelope and topic names): leased takes with fencing ack ids, batch takes and acks, dedup by
job id, lease renewal, releases, and "enqueued" notifications for distributed queues. A call Redis
does not answer raises :class:`RedisUnavailableError` within bounded timeouts; Redis that may evict
keys is refused (:class:`EvictionPolicyError`). All Redis logic is in ``queue.lua`` (topics:
``topics.lua``); key names are built in :mod:`redisq._keys`; everything works on Redis Cluster.
"""

from varmq.contract.protocols import DeadLetterRecord, QueueStats
from varmq.contract.rules import QueueOptions
from varmq.contract.stored_settings import QueueSettingsError

from ._distributed import DistributedPriorityQueue, DistributedQueue
from ._queue import PriorityQueue, Queue
from ._queues import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_RETRIES,
    DEFAULT_SOCKET_TIMEOUT,
    URL_SCHEMES,
    QueueKindError,
    Queues,
    UnknownQueueError,
    new,
    open_url,
)
from ._topics import LiveSubscription, Message, Topics, TopicsUnavailableError
from .errors import EvictionPolicyError, RedisUnavailableError

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_RETRIES",
    "DEFAULT_SOCKET_TIMEOUT",
    "URL_SCHEMES",
    "DeadLetterRecord",
    "DistributedPriorityQueue",
    "DistributedQueue",
    "EvictionPolicyError",
    "LiveSubscription",
    "Message",
    "PriorityQueue",
    "Queue",
    "QueueKindError",
    "QueueSettingsError",
    "QueueOptions",
    "QueueStats",
    "Queues",
    "RedisUnavailableError",
    "Topics",
    "TopicsUnavailableError",
    "UnknownQueueError",
    "new",
    "open_url",
]
