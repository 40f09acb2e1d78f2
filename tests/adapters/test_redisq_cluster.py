"""redisq on a three-node Redis Cluster: the conformance suite, and queues spread over the nodes.

The session's cluster (``redis_cluster`` fixture) has three primaries owning a third of the slots
each. Queue names hash to slots by their hash tag, so the suite's fresh names land on all three
nodes, and the client follows MOVED redirections between them. A script that touched a key it
was not handed, or keys of two slots, would fail here with CROSSSLOT.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster
from redis.crc import key_slot

from redisq.keys import queue_keys
from tests.adapters.test_redisq_conformance import CLAIMED, kill_live_subscribers, redisq_harness
from tests.support.redis_server import RedisClusterNodes
from varmq.testing import QueuesHarness
from varmq.testing.conformance import QueueConformance


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

    # What redisq implements today: see CLAIMED (release() is not there yet).
    extensions = CLAIMED

    @pytest.fixture(autouse=True)
    def _client(self, redis_cluster: RedisClusterNodes) -> Iterator[None]:
        self.cluster = redis_cluster
        self.client = RedisCluster(host="127.0.0.1", port=redis_cluster.ports[0])
        yield
        self.client.close()  # after the harness closed its queues

    def make_harness(self) -> QueuesHarness:
        ports = self.cluster.ports

        @contextlib.contextmanager
        def disconnect() -> Iterator[None]:
            nodes = [redis.Redis(host="127.0.0.1", port=port) for port in ports]
            try:
                kill_live_subscribers(*nodes)
            finally:
                for node in nodes:
                    node.close()
            yield

        return redisq_harness(self.client, disconnect)


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
