"""What exact cancels cost: a worker draining a queue that keeps job records, without prefetch.

On a queue with records (``keep_results``) a worker takes jobs only for its free slots unless
given a ``prefetch``, so that a job taken has started and a ``cancel`` that answered ``True``
means the job does not start (docs/results.md); with a ``prefetch``, each job taken ahead asks
the storage (``extend_lease_or_cancel``) before it starts. This drains N jobs added with ids
through a worker of concurrency 8, on sqliteq and on redisq (a redis-server started here on a
free loopback port), as shipped and with ``prefetch=8`` (what other queues take ahead by
default), alternating in the same process, best of ``--repeat``::

    .venv/bin/python benchmarks/records_prefetch.py
    .venv/bin/python benchmarks/records_prefetch.py -n 1000 --repeat 1    # a quick look
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import machine, setup_path, spread, uptime

setup_path()

import redisq  # noqa: E402
import sqliteq  # noqa: E402
import varmq  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

CONCURRENCY = 8


def _drain(open_queue: Callable[[str], Any], n: int, prefetch: int | None) -> float:
    """Seconds for a worker to run ``n`` jobs with ids on a fresh queue with records."""
    q = open_queue(f"drain-{uuid.uuid4().hex}")
    producer = varmq.new_distributed_queue(q)
    for i in range(n):
        producer.add(i, job_id=f"j{i}")
    worker = varmq.new_worker(lambda job: None, CONCURRENCY, auto_run=False, prefetch=prefetch)
    worker.with_distributed_queue(q)
    start = time.perf_counter()
    worker.start()
    assert worker.wait(300)
    elapsed = time.perf_counter() - start
    worker.stop_and_wait()
    assert worker.metrics.successful == n
    return elapsed


def _pair(name: str, open_queue: Callable[[str], Any], n: int, repeat: int) -> None:
    on: list[float] = []
    off: list[float] = []
    for _ in range(repeat):
        off.append(_drain(open_queue, n, CONCURRENCY))  # the prefetch of other queues
        on.append(_drain(open_queue, n, None))
    ratios = [o / c for o, c in zip(off, on, strict=True)]  # seconds: without over with
    print(
        f"| {name:<8} | {n / min(on):>12,.0f} | {n / min(off):>13,.0f} | "
        f"{min(off) / min(on):>5.2f} | {spread(ratios, '.2f'):>11} |"
    )


def _records_queue(store: Any) -> Callable[[str], Any]:
    return lambda name: store.new_distributed_queue(name, keep_results=60)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5000, help="jobs per drain (5000)")
    parser.add_argument("--repeat", type=int, default=5, help="paired runs (5)")
    args = parser.parse_args(argv)
    print(f"queues with records, no prefetch: {machine()}, {uptime()}")
    print("| store    | jobs/s, shipped | jobs/s, prefetch | ratio | ratio range |")
    print("|----------|-----------------|------------------|-------|-------------|")
    with tempfile.TemporaryDirectory() as tmp, sqliteq.new(Path(tmp) / "jobs.db") as store:
        _pair(
            "sqliteq",
            lambda name: store.new_distributed_queue(name, keep_results=60),
            args.n,
            args.repeat,
        )
    server = RedisServer()
    server.start()
    try:
        with redisq.new(server.url) as store:
            _pair(
                "redisq",
                lambda name: store.new_distributed_queue(name, keep_results=60),
                args.n,
                args.repeat,
            )
    finally:
        server.close()
    print("ratio: jobs/s as shipped over jobs/s with prefetch, best runs; range: paired runs.")


if __name__ == "__main__":
    main()
