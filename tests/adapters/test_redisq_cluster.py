"""redisq on Redis Cluster: the conformance suite on a one-node cluster owning every slot.

Cluster mode refuses any command or script whose keys fall into different slots (CROSSSLOT), so
passing here shows the hash tags and key declarations are right. A multi-node cluster (keys of
different queues on different nodes, MOVED redirections, failover) is not exercised.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from redis.cluster import RedisCluster

from tests.adapters.test_redisq_conformance import RedisqHarness
from tests.support.redis_server import RedisServer
from varmq.testing.conformance import ALL_EXTENSIONS, QueueConformance, StorageHarness


@pytest.fixture(scope="module")
def cluster_port() -> Iterator[int]:
    """Port of a one-node Redis Cluster started for this module."""
    server = RedisServer(cluster=True)
    server.start()
    try:
        assert server.port is not None
        yield server.port
    finally:
        server.close()


class _ClusterHarness(RedisqHarness):
    """Queues on a ``RedisCluster`` client, which the harness also closes."""

    def __init__(self, port: int) -> None:
        self.client = RedisCluster(host="127.0.0.1", port=port)
        super().__init__(self.client)

    def close(self) -> None:
        super().close()
        self.client.close()


class TestRedisqOnClusterConformance(QueueConformance):
    """redisq through ``redis.cluster.RedisCluster``."""

    extensions = ALL_EXTENSIONS

    @pytest.fixture(autouse=True)
    def _cluster(self, cluster_port: int) -> None:
        self.cluster_port = cluster_port

    def make_harness(self) -> StorageHarness:
        return _ClusterHarness(self.cluster_port)
