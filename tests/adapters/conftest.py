"""Fixtures for the adapter tests: a Redis Cluster for the session, fakeredis, a test clock.

``redis_url`` and ``redis_db`` (the session's Redis database, flushed before each test for
``redis_db``) come from ``tests/conftest.py``. ``redis_cluster`` starts a three-node Redis Cluster
for the session (always started here: ``VARMQ_TEST_REDIS_URL`` names one database, not a
cluster). ``backend`` runs a test twice, on the session's database and on fakeredis
(``fakeredis.FakeRedis`` with Lua); ``stoppable_backend`` also runs twice, but on a server of its
own that the test may stop, restart or take away. No Redis test is ever skipped: without a
usable server binary the session's Redis tests fail and say what to install.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import pytest

import redisq
from tests.support.redis_server import RedisClusterNodes, RedisServer


class MsClock:
    """Integer milliseconds that move only by :meth:`advance` (redisq's ``clock``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards _now_ms; it only grows
        self._now_ms = int(time.time() * 1000)

    def __call__(self) -> int:
        with self._lock:
            return self._now_ms

    def advance(self, seconds: float) -> None:
        """Move the clock ``seconds`` forward."""
        with self._lock:
            self._now_ms += round(seconds * 1000)


class Backend:
    """Opens ``redisq.Queues`` on one Redis (real or fake) and can take that Redis away."""

    def __init__(
        self,
        name: str,
        connect: Callable[[], Any],
        *,
        server: RedisServer | None = None,
        fake_server: Any = None,
    ) -> None:
        self.name = name
        self._connect = connect
        self.server = server
        self.fake_server = fake_server
        self._opened: list[redisq.Queues] = []

    def queues(self, clock: Callable[[], int] | None = None) -> redisq.Queues:
        """A new ``Queues`` (a new connection) on this Redis, closed after the test."""
        # fakeredis has no CONFIG command, hence no eviction policy to check.
        opened = redisq.new(self._connect(), clock=clock, check_eviction=self.name != "fakeredis")
        self._opened.append(opened)
        return opened

    def stop(self) -> None:
        """Make Redis unreachable."""
        if self.server is not None:
            self.server.stop()
        else:
            self.fake_server.connected = False

    def start(self) -> None:
        """Make Redis reachable again (same port, same data when AOF is on)."""
        if self.server is not None:
            self.server.start()
        else:
            self.fake_server.connected = True

    def restart(self) -> None:
        """Stop and start Redis: every connection drops."""
        self.stop()
        self.start()

    def close(self) -> None:
        for opened in self._opened:
            opened.close()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterNodes]:
    """A three-node Redis Cluster on loopback, slots split evenly, for the whole session."""
    cluster = RedisClusterNodes(3)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(params=["redis", "fakeredis"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """The session's redis-server (flushed) or a fresh fakeredis server."""
    if request.param == "redis":
        url = request.getfixturevalue("redis_db")
        made = Backend("redis", lambda: url)
    else:
        fake = fakeredis.FakeServer()
        made = Backend("fakeredis", lambda: fakeredis.FakeRedis(server=fake), fake_server=fake)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture(params=["redis", "fakeredis"])
def stoppable_backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A redis-server of this test's own (AOF on, so a restart keeps the jobs) or fakeredis."""
    if request.param == "fakeredis":
        fake = fakeredis.FakeServer()
        made = Backend("fakeredis", lambda: fakeredis.FakeRedis(server=fake), fake_server=fake)
        try:
            yield made
        finally:
            made.close()
        return
    server = RedisServer(appendonly=True)
    server.start()
    made = Backend("redis", lambda: server.url, server=server)
    try:
        yield made
    finally:
        made.close()
        server.close()


@pytest.fixture
def clock() -> MsClock:
    """A clock for ``redisq.new(..., clock=clock)`` that moves only when told."""
    return MsClock()
