"""The exceptions redisq raises when Redis cannot answer, or answers in a way it must refuse.

No I/O here; :mod:`redisq._script` and :mod:`redisq._queues` raise these with the cause chained.
"""

from __future__ import annotations

from redis.exceptions import RedisClusterException, RedisError

__all__ = ["FAILURES", "EvictionPolicyError", "RedisUnavailableError"]

FAILURES: tuple[type[BaseException], ...] = (RedisError, RedisClusterException, OSError)
"""What a Redis call can fail with besides a caller's mistake: lost connections, timeouts,
cluster errors (``RedisClusterException`` is no ``RedisError``), refusals, socket errors."""


class RedisUnavailableError(ConnectionError):
    """Redis could not answer a redisq call: unreachable, too slow, or it refused the call.

    The message names the operation, the queue (when there is one) and the server without its
    password; the redis-py exception is the ``__cause__``. Raised by every queue method and by
    ``Queues`` calls that reach Redis, within the connect and socket timeouts of the client (see
    docs/redisq.md, "Errors and timeouts"), instead of answering for Redis: an empty take, a
    ``False`` from ``extend_lease`` or a ``0`` from ``len()`` are always Redis's own answer.
    A call that raised after its command reached Redis (a timeout) may still have been done,
    whole: every command is one atomic script.
    """


class EvictionPolicyError(RuntimeError):
    """Redis may evict keys (``maxmemory-policy`` is not ``noeviction``), so it could drop jobs.

    Raised when the first queue of a ``Queues`` is opened (and by ``open_url``); the message
    names the policy and the fix. ``check_eviction=False`` skips the check.
    """
