"""The one place that runs ``queue.lua``: loads it once, calls it, and turns failures loud.

Every queue operation is one EVALSHA of the same script (redis-py's ``Script`` reloads it after
NOSCRIPT, e.g. when Redis restarted). A call that fails (connection lost, timeout, cluster
error, a refusal by Redis) raises :class:`~redisq.errors.RedisUnavailableError` naming the
operation, the queue and the server, with the redis-py exception as its cause; the first
failure of an outage is also logged once by :class:`~redisq._health.Health`. A runner whose
``Queues`` was closed reaches nothing and returns :data:`FAILED`, which each queue method turns
into its "nothing" value.
"""

from __future__ import annotations

import hashlib
import importlib.resources
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias

from redis import Redis
from redis.cluster import RedisCluster

from ._health import Health
from .errors import FAILURES

Client: TypeAlias = "Redis | RedisCluster"

__all__ = ["FAILED", "SCRIPT_SHA", "SCRIPT_TEXT", "Client", "Failed", "ScriptRunner"]

SCRIPT_TEXT: Final = importlib.resources.files("redisq").joinpath("queue.lua").read_text("utf-8")
# The name EVALSHA calls the script by.
SCRIPT_SHA: Final = hashlib.sha1(SCRIPT_TEXT.encode("utf-8")).hexdigest()


class Failed:
    """The type of :data:`FAILED`: a call made after ``Queues.close()``, which reaches nothing."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "redisq.FAILED"


FAILED: Final = Failed()


class ScriptRunner:
    """Runs ``queue.lua`` on one client for every queue of one ``Queues``.

    ``clock`` returns the current time in integer milliseconds; ``None`` lets the script use the
    server's ``TIME`` (the default, so hosts with skewed clocks agree).
    """

    def __init__(self, client: Client, health: Health, clock: Callable[[], int] | None) -> None:
        self.client = client
        self._script = client.register_script(SCRIPT_TEXT)
        self._health = health
        self._clock = clock
        # Set once by Queues.close(); from then on nothing reaches Redis through this runner.
        self.closed = False

    @property
    def health(self) -> Health:
        """Where failures are reported."""
        return self._health

    def now_arg(self) -> str:
        """The script's ARGV[2]: the ``clock`` hook's time, or "" for the server's ``TIME``."""
        return "" if self._clock is None else str(int(self._clock()))

    def run(self, queue: str, keys: Sequence[str], command: str, *args: bytes | str | int) -> Any:
        """Run ``command`` of the script on ``keys``; :data:`FAILED` once ``Queues`` is closed.

        Raises :class:`~redisq.errors.RedisUnavailableError` when Redis does not answer.
        """
        if self.closed:
            return FAILED
        now = self.now_arg()
        try:
            result = self._script(keys=keys, args=(command, now, *args))
        except FAILURES as exc:
            # The group commit's "add" is what callers know as enqueue.
            operation = "enqueue" if command == "add" else command
            raise self._health.failed(queue, operation, exc) from exc
        self._health.ok()
        return result
