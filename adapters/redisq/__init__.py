"""redisq: Redis storage for varmq.

``redisq.new(url_or_client)`` returns :class:`Queues` (``redisq.open_url(url)`` does too, after
checking that Redis answers), which opens FIFO, priority and
distributed queues. They implement the varmq storage protocols structurally (this package does
not import varmq): leased takes with fencing ack ids, batch takes and acks, dedup by job id,
lease renewal, and "enqueued" notifications for distributed queues. All Redis logic is in
``queue.lua``; key names are built in :mod:`redisq.keys`; everything works on Redis Cluster.
"""

from redisq.checks import DeadLetterRecord, QueueOptions, QueueStats
from redisq.distributed import DistributedPriorityQueue, DistributedQueue
from redisq.queue import PriorityQueue, Queue
from redisq.queues import (
    URL_SCHEMES,
    QueueKindError,
    Queues,
    RedisUnavailableError,
    UnknownQueueError,
    new,
    open_url,
)
from redisq.topics import LiveSubscription, Message, Topics, TopicsUnavailableError

__all__ = [
    "URL_SCHEMES",
    "DeadLetterRecord",
    "DistributedPriorityQueue",
    "DistributedQueue",
    "LiveSubscription",
    "Message",
    "PriorityQueue",
    "Queue",
    "QueueKindError",
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
