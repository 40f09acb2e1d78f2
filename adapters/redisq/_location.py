"""How redisq names a Redis in messages: its URL without credentials, or what a client says.

:func:`redact` takes the secrets out of a URL (:func:`varmq.contract.urls.redact_url`, the one
redaction of varmq and its adapters); ``Queues.location``, its ``repr``, every log line
(:class:`~redisq._health.Health`) and every error use what it gives. No I/O here.
"""

from __future__ import annotations

from redis.cluster import RedisCluster

from varmq.contract.urls import redact_url as redact

from ._script import Client

__all__ = ["describe", "redact"]


def describe(client: Client) -> str:
    """Where a client passed in points, for messages (it holds no password)."""
    if isinstance(client, RedisCluster):
        return "Redis Cluster"
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    host, port = kwargs.get("host", "localhost"), kwargs.get("port", 6379)
    return f"redis://{host}:{port}/{kwargs.get('db', 0)}"
