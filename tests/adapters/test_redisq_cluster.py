"""redisq on a three-node Redis Cluster: the conformance suite, and queues spread over the nodes.

The session's cluster (``redis_cluster`` fixture) has three primaries owning a third of the slots
each. Queue names hash to slots by their hash tag, so the suite's fresh names land on all three
nodes, and the client follows MOVED redirections between them. A script that touched a key it
was not handed, or keys of two slots, would fail here with CROSSSLOT.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import pytest
import redis
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.crc import key_slot
from redis.exceptions import RedisClusterException, RedisError
from redis.retry import Retry

import redisq
from redisq._keys import queue_keys
from tests.adapters.test_redisq_conformance import (
    CLAIMED,
    OUTAGE_SOCKET_TIMEOUT,
    kill_live_subscribers,
    redisq_harness,
)
from tests.support.redis_server import RedisClusterNodes
from varmq.testing import QueuesHarness
from varmq.testing.conformance import QueueConformance

# RedisCluster tries a timed-out command twice, so a call during an outage takes about twice
# OUTAGE_SOCKET_TIMEOUT (a topics publish, which sends more than one command, four times); the
# suite makes at most two calls per outage.
CLUSTER_PAUSE_SECONDS = 2.5


def _names_on_every_node(cluster: RedisClusterNodes) -> dict[int, str]:
    """One queue name per node (port -> name), found by hashing candidate names."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < len(cluster.nodes):
        name = f"spread-{i}"
        port = cluster.port_of_slot(key_slot(queue_keys(name).keys[0].encode()))
        found.setdefault(port, name)
        i += 1
    return found


class TestRedisqOnClusterConformance(QueueConformance):
    """redisq through ``redis.cluster.RedisCluster`` on three nodes; a client per test."""

    # Every extension, job records included: see CLAIMED.
    extensions = CLAIMED

    @pytest.fixture(autouse=True)
    def _client(self, redis_cluster: RedisClusterNodes) -> Iterator[None]:
        # Short timeouts and one retry, so that a call during an outage raises well within the
        # pause (redis-py's default is ten retries with backoff, which from 8.2 on outlast it).
        self.client = RedisCluster(
            host="127.0.0.1",
            port=redis_cluster.ports[0],
            socket_timeout=OUTAGE_SOCKET_TIMEOUT,
            socket_connect_timeout=OUTAGE_SOCKET_TIMEOUT,
            retry=Retry(NoBackoff(), 1),
        )
        self.admins = [redis.Redis(host="127.0.0.1", port=port) for port in redis_cluster.ports]
        yield
        self.client.close()  # after the harness closed its queues
        for admin in self.admins:
            admin.close()

    def make_harness(self) -> QueuesHarness:
        return redisq_harness(self.client, outage=self._pause_nodes, disconnect=self._disconnect)

    @contextlib.contextmanager
    def _pause_nodes(self) -> Iterator[None]:
        """Every node paused (CLIENT PAUSE ALL) for CLUSTER_PAUSE_SECONDS."""
        for admin in self.admins:
            admin.execute_command("CLIENT", "PAUSE", round(CLUSTER_PAUSE_SECONDS * 1000), "ALL")
        try:
            yield
        finally:
            for admin in self.admins:
                admin.ping()  # held until that node's pause is over

    @contextlib.contextmanager
    def _disconnect(self) -> Iterator[None]:
        """The connections of live topic subscribers cut on every node."""
        kill_live_subscribers(*self.admins)
        yield


def test_cluster_has_three_nodes_each_owning_a_third_of_the_slots(
    redis_cluster: RedisClusterNodes,
) -> None:
    client = RedisCluster(host="127.0.0.1", port=redis_cluster.ports[1])
    try:
        primaries = {node.port for node in client.get_primaries()}
        owners = {int(port) for port in primaries}
        assert owners == set(redis_cluster.ports)
        for slot, port in [(0, 0), (8000, 1), (16383, 2)]:
            assert client.nodes_manager.get_node_from_slot(slot).port == redis_cluster.ports[port]
    finally:
        client.close()


def test_queues_used_together_land_on_at_least_two_different_nodes(
    redis_cluster: RedisClusterNodes,
) -> None:
    names = _names_on_every_node(redis_cluster)
    client = RedisCluster(host="127.0.0.1", port=redis_cluster.ports[0])
    harness = redisq_harness(client)
    try:
        queues = {
            port: harness.new_queue(name, priority=False, distributed=True, visibility_timeout=60)
            for port, name in names.items()
        }
        for port, q in queues.items():
            assert q.enqueue(f"job on {port}".encode())
        # Each node holds the keys of its own queue and not the others'.
        holders: set[int] = set()
        for port in redis_cluster.ports:
            node = redis.Redis(host="127.0.0.1", port=port)
            try:
                for name in names.values():
                    ready = queue_keys(name).keys[1]
                    if redis_cluster.port_of_slot(key_slot(ready.encode())) == port:
                        assert node.zcard(ready) == 1
                        holders.add(port)
            finally:
                node.close()
        assert len(holders) >= 2
        assert holders == set(redis_cluster.ports)
        for port, q in queues.items():
            taken = q.dequeue_with_ack_id()
            assert taken is not None and taken[0] == f"job on {port}".encode()
            assert q.acknowledge(taken[1])
    finally:
        harness.close()
        client.close()


def test_a_frozen_or_stopped_cluster_raises_redis_unavailable_caused_by_the_cluster_error() -> None:
    cluster = RedisClusterNodes(1)
    cluster.start()
    client = RedisCluster(
        host="127.0.0.1", port=cluster.ports[0], socket_timeout=0.5, socket_connect_timeout=0.5
    )
    try:
        with redisq.new(client) as queues:
            q = queues.new_distributed_queue("cluster-outage")
            assert q.enqueue(b"before")
            node = cluster.nodes[0]
            node.freeze()
            started = time.monotonic()
            try:
                with pytest.raises(
                    redisq.RedisUnavailableError, match="enqueue on queue"
                ) as frozen:
                    q.enqueue(b"during")
            finally:
                node.thaw()
            took = time.monotonic() - started
            assert isinstance(frozen.value.__cause__, (RedisClusterException, RedisError))
            assert took < 5.0, took
            assert q.values()[0] == b"before"
            node.stop()
            with pytest.raises(redisq.RedisUnavailableError, match="take on queue") as stopped:
                q.dequeue_batch_with_attempts(1)
            assert isinstance(stopped.value.__cause__, (RedisClusterException, RedisError))
            print(f"\nfrozen one-node cluster (socket timeout 0.5 s): raised after {took:.2f} s")
    finally:
        client.close()
        cluster.close()
