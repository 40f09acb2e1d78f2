"""Publisher processes for the topic acceptance tests, run as ``python -m``.

    python -m tests.acceptance.topic_actors publish SQLITE_PATH REDIS_URL FIRST COUNT [retry]
    python -m tests.acceptance.topic_actors publish-redis REDIS_URL FIRST COUNT

``publish`` publishes messages ``FIRST`` .. ``FIRST + COUNT - 1`` to ``orders.<n % 7>`` with
message id ``order-<n>`` through the topics of both stores (the sqliteq file and the Redis),
retrying a publish that raised (storage away for a moment). With ``retry`` it then publishes
every one of them again, as a producer that lost the replies would. It prints one line:
``stored <copies stored by the first pass> retried <copies stored by the second>``.
``publish-redis`` publishes to Redis only and prints how many copies it stored.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import redisq
import sqliteq


def _publish(topics: Any, n: int) -> int:
    for _ in range(100):
        try:
            return int(topics.publish(f"orders.{n % 7}", {"n": n}, message_id=f"order-{n}"))
        except OSError:  # the storage is away for a moment; the message id makes a retry safe
            time.sleep(0.05)
    raise RuntimeError(f"could not publish order-{n}")


def publish(sqlite_path: str, redis_url: str, first: int, count: int, retry: bool) -> None:
    files, server = sqliteq.new(sqlite_path), redisq.new(redis_url)
    stores = [files.topics(), server.topics()]
    stored = sum(_publish(t, n) for n in range(first, first + count) for t in stores)
    retried = 0
    if retry:
        retried = sum(_publish(t, n) for n in range(first, first + count) for t in stores)
    print(f"stored {stored} retried {retried}", flush=True)
    files.close()
    server.close()


def publish_redis(redis_url: str, first: int, count: int) -> None:
    server = redisq.new(redis_url)
    topics = server.topics()
    print(sum(_publish(topics, n) for n in range(first, first + count)), flush=True)
    server.close()


if __name__ == "__main__":
    if sys.argv[1] == "publish":
        publish(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), "retry" in sys.argv)
    else:
        publish_redis(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
