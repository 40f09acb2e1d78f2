"""The storage conformance suite on redisq: on a redis-server of its own and on fakeredis.

Lease time is moved by a test clock handed to ``redisq.new(..., clock=...)``, so the suite's
lease tests take no real time; ``test_redisq.py`` covers leases on the server's own clock. Both
runs have an outage, so the suite's outage tests run: the server is paused (CLIENT PAUSE ALL)
for the real one, the connection switched off for fakeredis. Both can also cut the connections
of live topic subscribers (``disconnect``), for the reconnection test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
import redis

import redisq
from redisq._script import Client
from tests.support.redis_server import RedisServer
from varmq.testing import FakeWallClock, QueuesHarness
from varmq.testing.conformance import ALL_EXTENSIONS, ASYNC_EXTENSIONS, QueueConformance
from varmq.testing.harness import Outage

# redisq implements every extension, job records (RECORD_EXTENSIONS) and async adds included.
CLAIMED = (*ALL_EXTENSIONS, *ASYNC_EXTENSIONS)

# The outage of the real-server run: CLIENT PAUSE ... ALL on a server of the class's own, so
# commands sent meanwhile are held and, once their client timed out and hung up, dropped (a
# SIGSTOPped server would run them when it resumes). The pause ends by itself; the harness's
# calls, with these timeouts and no retry, raise well within it.
PAUSE_SECONDS = 1.2
OUTAGE_SOCKET_TIMEOUT = 0.4


def kill_live_subscribers(*clients: redis.Redis) -> None:
    """Close the connections of the live topic subscribers (pattern subscriptions) of this
    suite's database on the servers of ``clients``, as a network failure would; each
    subscriber reconnects on its own."""
    for client in clients:
        db = str(client.connection_pool.connection_kwargs.get("db", 0))
        for entry in client.client_list(_type="pubsub"):
            if int(entry.get("psub", 0)) > 0 and entry.get("db") == db:
                client.client_kill_filter(_id=entry["id"])


def redisq_harness(
    client: Client | str,
    *,
    check_eviction: bool = True,
    outage: Outage | None = None,
    disconnect: Outage | None = None,
    **connection: Any,
) -> QueuesHarness:
    """Every queue of a test on one ``redisq.Queues`` whose time moves only by ``advance``;
    ``outage`` takes the server away, ``disconnect`` live topic subscribers' connections."""
    clock = FakeWallClock()
    queues = redisq.new(client, clock=clock, check_eviction=check_eviction, **connection)
    return QueuesHarness(lambda: queues, clock.advance, outage=outage, disconnect=disconnect)


def paused(admin: redis.Redis) -> Outage:
    """An outage: every client of ``admin``'s server waits ``PAUSE_SECONDS``, then it answers."""

    @contextlib.contextmanager
    def outage() -> Iterator[None]:
        admin.execute_command("CLIENT", "PAUSE", round(PAUSE_SECONDS * 1000), "ALL")
        try:
            yield
        finally:
            admin.ping()  # held until the pause is over

    return outage


def fake_outage(server: fakeredis.FakeServer) -> Outage:
    """An outage of a fakeredis server: every command fails with a ConnectionError."""

    @contextlib.contextmanager
    def outage() -> Iterator[None]:
        server.connected = False
        try:
            yield
        finally:
            server.connected = True

    return outage


@pytest.fixture(scope="class")
def pausable_server() -> Iterator[RedisServer]:
    """A redis-server for one test class, which its outages pause."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


class TestRedisqConformance(QueueConformance):
    """redisq on a real redis-server; every test uses fresh queue names, so no flushing."""

    extensions = CLAIMED

    @pytest.fixture(autouse=True)
    def _server(self, pausable_server: RedisServer) -> Iterator[None]:
        self.redis_url = pausable_server.url
        self.admin = redis.Redis.from_url(pausable_server.url)
        yield
        self.admin.close()

    def make_harness(self) -> QueuesHarness:
        admin = self.admin

        @contextlib.contextmanager
        def disconnect() -> Iterator[None]:
            kill_live_subscribers(admin)
            yield

        return redisq_harness(
            self.redis_url,
            outage=paused(admin),
            disconnect=disconnect,
            socket_connect_timeout=OUTAGE_SOCKET_TIMEOUT,
            socket_timeout=OUTAGE_SOCKET_TIMEOUT,
            retries=0,
        )


class TestRedisqOnFakeredisConformance(QueueConformance):
    """redisq on fakeredis (its Lua runtime), one fresh fake server per test."""

    extensions = CLAIMED
    drain_jobs = 2_000  # fakeredis runs the scripts in Python: 10,000 jobs take 25 s a kind

    def make_harness(self) -> QueuesHarness:
        # fakeredis has no CONFIG command, hence no eviction policy to check.
        server = fakeredis.FakeServer()

        @contextlib.contextmanager
        def disconnect() -> Iterator[None]:
            # The fake server is this test's own: every pub/sub connection on it is ours.
            fakeredis.FakeRedis(server=server).client_kill_filter(_type="pubsub")
            yield

        return redisq_harness(
            fakeredis.FakeRedis(server=server),
            check_eviction=False,
            outage=fake_outage(server),
            disconnect=disconnect,
        )
