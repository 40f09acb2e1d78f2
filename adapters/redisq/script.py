"""The one place that runs ``queue.lua``: loads it once, calls it, and turns failures loud.

Every queue operation is one EVALSHA of the same script (redis-py's ``Script`` reloads it after
NOSCRIPT, e.g. when Redis restarted). A call that fails (connection lost, timeout, cluster
error, a refusal by Redis) raises :class:`~redisq.errors.RedisUnavailableError` naming the
operation, the queue and the server, with the redis-py exception as its cause; the first
failure of an outage is also logged once by :class:`~redisq.health.Health`. A runner whose
``Queues`` was closed reaches nothing and returns :data:`FAILED`, which each queue method turns
into its "nothing" value.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Callable, Sequence
from typing import Any, Final, TypeAlias

from redis import Redis
from redis.cluster import RedisCluster

from redisq.errors import FAILURES
from redisq.health import Health

Client: TypeAlias = "Redis | RedisCluster"

__all__ = ["FAILED", "Client", "Failed", "ScriptRunner"]

SCRIPT_TEXT: Final = importlib.resources.files("redisq").joinpath("queue.lua").read_text("utf-8")


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
        self._script = client.register_script(SCRIPT_TEXT)
        self._health = health
        self._clock = clock
        # Set once by Queues.close(); from then on nothing reaches Redis through this runner.
        self.closed = False

    @property
    def health(self) -> Health:
        """Where failures are reported."""
        return self._health

    def run(self, queue: str, keys: Sequence[str], command: str, *args: bytes | str | int) -> Any:
        """Run ``command`` of the script on ``keys``; :data:`FAILED` once ``Queues`` is closed.

        Raises :class:`~redisq.errors.RedisUnavailableError` when Redis does not answer.
        """
        if self.closed:
            return FAILED
        now = "" if self._clock is None else str(int(self._clock()))
        try:
            result = self._script(keys=keys, args=(command, now, *args))
        except FAILURES as exc:
            raise self._health.failed(queue, command, exc) from exc
        self._health.ok()
        return result
