"""Warn once per condition: how redisq reports a Redis it cannot reach.

Queue methods never raise Redis errors; they return their "nothing" value and report here. The
first failure of a kind logs one warning on the ``redisq`` logger; repeats are silent; the next
success logs that Redis answers again and re-arms the warnings. No I/O here besides logging.
"""

from __future__ import annotations

import logging
import threading

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

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

    def failed(self, queue: str, operation: str, exc: BaseException) -> None:
        """Record that ``operation`` on ``queue`` failed with ``exc``; warn if it is new.

        ``queue`` is ``""`` for the pub/sub listener, which serves every queue.
        """
        if isinstance(exc, (RedisConnectionError, RedisTimeoutError, OSError)):
            condition: tuple[str, ...] = ("unreachable",)
            message = (
                f"redisq: Redis at {self._where} is unreachable ({type(exc).__name__}: {exc}); "
                "queue calls return empty results until it answers again"
            )
        else:
            condition = ("error", queue, operation, type(exc).__name__)
            subject = f"queue {queue!r}" if queue else "listener"
            message = (
                f"redisq: {subject}: Redis at {self._where} refused {operation} "
                f"({type(exc).__name__}: {exc})"
            )
        with self._lock:
            self._failing = True
            if condition in self._active:
                return
            self._active.add(condition)
        logger.warning(message)

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
