"""Warn once per condition, and build the error: how redisq reports a Redis it cannot reach.

A queue method whose call fails reports here and raises the
:class:`~redisq.errors.RedisUnavailableError` :meth:`Health.failed` returns. The first failure
of a kind also logs one warning on the ``redisq`` logger; repeats are silent (each call still
raises); the next success logs that Redis answers again and re-arms the warnings. No I/O here
besides logging.
"""

from __future__ import annotations

import logging
import threading

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisClusterException
from redis.exceptions import TimeoutError as RedisTimeoutError

from .errors import RedisUnavailableError

__all__ = ["Health", "logger"]

logger = logging.getLogger("redisq")


class Health:
    """Failure bookkeeping shared by every queue of one ``Queues``.

    ``where`` names the server in messages (a URL without its password).
    """

    def __init__(self, where: str) -> None:
        self._where = where
        # Protects _active: the conditions already warned about since the last success.
        self._lock = threading.Lock()
        self._active: set[tuple[str, ...]] = set()
        # Protected by the same lock: caller mistakes already reported (never re-armed).
        self._reported: set[tuple[str, ...]] = set()
        # Read without the lock on the hot path: a stale False only delays the recovery log.
        self._failing = False

    @property
    def where(self) -> str:
        """The server these messages name."""
        return self._where

    def failed(self, queue: str, operation: str, exc: BaseException) -> RedisUnavailableError:
        """Record that ``operation`` on ``queue`` failed with ``exc``; warn if it is new.

        Returns the error the caller raises (``raise health.failed(...) from exc``): it names
        the operation, the queue and the server. ``queue`` is ``""`` for calls that concern no
        one queue (the pub/sub listener, the registry, the eviction check).
        """
        subject = f"{operation} on queue {queue!r}" if queue else operation
        cause = f"{type(exc).__name__}: {exc}"
        if isinstance(
            exc, (RedisConnectionError, RedisTimeoutError, RedisClusterException, OSError)
        ):
            condition: tuple[str, ...] = ("unreachable",)
            error = f"redisq: {subject}: Redis at {self._where} is unreachable ({cause})"
            message = (
                f"redisq: Redis at {self._where} is unreachable ({cause}); queue calls raise "
                "RedisUnavailableError until it answers again"
            )
        else:
            condition = ("error", queue, operation, type(exc).__name__)
            error = f"redisq: {subject}: Redis at {self._where} refused it ({cause})"
            message = error
        with self._lock:
            self._failing = True
            new = condition not in self._active
            self._active.add(condition)
        if new:
            logger.warning(message)
        return RedisUnavailableError(error)

    def ok(self) -> None:
        """Record a success; after failures, say once that Redis answers again."""
        if not self._failing:
            return
        with self._lock:
            if not self._failing:
                return
            self._failing = False
            self._active.clear()
        logger.info("redisq: Redis at %s answers again", self._where)

    def warn_once(
        self, condition: tuple[str, ...], message: str, *, exc_info: bool = False
    ) -> None:
        """Log ``message`` the first time ``condition`` occurs (caller errors, bad callbacks)."""
        with self._lock:
            if condition in self._reported:
                return
            self._reported.add(condition)
        logger.warning(message, exc_info=exc_info)
