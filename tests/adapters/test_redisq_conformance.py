"""The storage conformance suite on redisq: on the session's redis-server and on fakeredis.

Lease time is moved by a test clock handed to ``redisq.new(..., clock=...)``, so the suite's
lease tests take no real time; ``test_redisq.py`` covers leases on the server's own clock.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
import redis
from redis.cluster import RedisCluster

import redisq
from tests.adapters.conftest import MsClock
from varmq.testing.conformance import ALL_EXTENSIONS, QueueConformance, StorageHarness


class RedisqHarness:
    """Queues on one ``redisq.Queues`` whose lease time moves only by ``advance``."""

    def __init__(self, client: redis.Redis | RedisCluster | str) -> None:
        self.clock = MsClock()
        self.queues = redisq.new(client, clock=self.clock)

    def new_queue(
        self,
        name: str,
        *,
        priority: bool,
        distributed: bool,
        visibility_timeout: float,
        **options: Any,
    ) -> Any:
        opener: Callable[..., Any] = {
            (False, False): self.queues.new_queue,
            (True, False): self.queues.new_priority_queue,
            (False, True): self.queues.new_distributed_queue,
            (True, True): self.queues.new_distributed_priority_queue,
        }[priority, distributed]
        return opener(name, visibility_timeout=visibility_timeout, **options)

    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    def close(self) -> None:
        self.queues.close()


class TestRedisqConformance(QueueConformance):
    """redisq on a real redis-server; every test uses fresh queue names, so no flushing."""

    extensions = ALL_EXTENSIONS  # set_capacity included

    @pytest.fixture(autouse=True)
    def _server(self, redis_url: str) -> None:
        self.redis_url = redis_url

    def make_harness(self) -> StorageHarness:
        return RedisqHarness(self.redis_url)


class TestRedisqOnFakeredisConformance(QueueConformance):
    """redisq on fakeredis (its Lua runtime), one fresh fake server per test."""

    extensions = ALL_EXTENSIONS

    def make_harness(self) -> StorageHarness:
        return RedisqHarness(fakeredis.FakeRedis(server=fakeredis.FakeServer()))
