"""How redisq names a Redis in messages: its URL without credentials, or what a client says.

:func:`redact` is the one place that takes secrets out of a URL; ``Queues.location``, its
``repr``, every log line (:class:`~redisq.health.Health`) and every error use what it gives.
No I/O here.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, quote, urlsplit

from redis.cluster import RedisCluster

from redisq.script import Client

__all__ = ["describe", "redact"]

_HIDDEN = "***"


def redact(url: str) -> str:
    """``url`` with the password of its user info and every ``*password=`` query value hidden.

    ``redis://user:secret@host:6379/0?ssl_password=x`` becomes
    ``redis://user:***@host:6379/0?ssl_password=***``. A URL that does not parse is hidden
    whole after its scheme, since where its secrets are cannot be told.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        scheme, sep, _ = url.partition("://")
        return f"{scheme}{sep}{_HIDDEN}" if sep else _HIDDEN
    netloc = parts.netloc
    if parts.password is not None:
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"  # an IPv6 address
        if port is not None:
            host = f"{host}:{port}"
        netloc = f"{parts.username or ''}:{_HIDDEN}@{host}"
    query = parts.query
    if "password" in query.lower():
        pairs = parse_qsl(query, keep_blank_values=True)
        query = "&".join(
            f"{quote(key)}={_HIDDEN if key.lower().endswith('password') else quote(value)}"
            for key, value in pairs
        )
    # Put together by hand: urlunsplit drops the empty host of unix:///path.
    shown = f"{parts.scheme}://{netloc}{parts.path}" if parts.scheme else url
    return shown + (f"?{query}" if query else "") + (f"#{parts.fragment}" if parts.fragment else "")


def describe(client: Client) -> str:
    """Where a client passed in points, for messages (it holds no password)."""
    if isinstance(client, RedisCluster):
        return "Redis Cluster"
    kwargs = client.connection_pool.connection_kwargs
    if "path" in kwargs:
        return f"unix://{kwargs['path']}"
    host, port = kwargs.get("host", "localhost"), kwargs.get("port", 6379)
    return f"redis://{host}:{port}/{kwargs.get('db', 0)}"
