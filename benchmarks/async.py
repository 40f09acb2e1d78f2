"""Async enqueue throughput: ``add_async`` with 100 calls in flight, against raw async clients.

A service adds jobs from request handlers, many at once. Each figure is N adds made by one
coroutine keeping ``--in-flight`` calls outstanding (``asyncio.gather`` of 100 at a time, the
pattern the asyncio job queues publish their figures for), measured in this process, in the same
run as its baseline:

1. redisq ``await handle.add_async(i)`` on a distributed queue; baseline: ``redis.asyncio``
   ``LPUSH`` of the same bytes with the same number in flight (one connection pool).
2. sqliteq ``await handle.add_async(i)``; baseline: an autocommit ``INSERT`` per job on one
   dedicated thread (the way aiosqlite runs sqlite3), WAL, ``synchronous=NORMAL``.

Targets: redisq at least 0.7x raw ``redis.asyncio`` and 3x the best asyncio peer measured on this
machine (SAQ, about 5.7k/s); sqliteq at least 20,000 adds/s. Each figure is measured
``--repeat`` times (default 3): the table gives the median and the min-max spread. Redis: a
redis-server started here on a free loopback port. Run from the repository root::

    .venv/bin/python benchmarks/async.py
    .venv/bin/python benchmarks/async.py -n 2000 --repeat 1    # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "benchmarks"]
sys.path.insert(0, str(_ROOT))

import redis.asyncio as aioredis  # noqa: E402

import redisq  # noqa: E402
import sqliteq  # noqa: E402
import varmq  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402

BEST_PEER = 5_700.0
"""SAQ's enqueue rate with 100 in flight on this machine, the best of the asyncio peers."""

Adds = Callable[[int], Awaitable[None]]


async def _rate(n: int, in_flight: int, add: Callable[[int], Awaitable[Any]]) -> float:
    start = time.perf_counter()
    for first in range(0, n, in_flight):
        await asyncio.gather(*(add(i) for i in range(first, min(first + in_flight, n))))
    return n / (time.perf_counter() - start)


def _payload() -> bytes:
    return varmq.contract.envelope.encode("", 0)  # the bytes a plain add of 0 stores


async def redisq_adds(url: str, n: int, in_flight: int, run: int) -> float:
    store = redisq.new(url)
    try:
        handle = varmq.new_distributed_queue(store.new_distributed_queue(f"async-{run}"))
        await handle.add_async(0)  # connections and threads up before the clock starts
        return await _rate(n, in_flight, handle.add_async)
    finally:
        store.close()


async def raw_lpush(url: str, n: int, in_flight: int, run: int) -> float:
    client = aioredis.Redis.from_url(url, max_connections=in_flight)
    payload, key = _payload(), f"raw-async-{run}"
    try:
        await client.lpush(key, payload)

        async def add(_: int) -> None:
            await client.lpush(key, payload)

        return await _rate(n, in_flight, add)
    finally:
        await client.aclose()


async def sqliteq_adds(path: str, n: int, in_flight: int, run: int) -> float:
    store = sqliteq.new(path)
    try:
        handle = varmq.new_distributed_queue(store.new_distributed_queue(f"async-{run}"))
        await handle.add_async(0)
        return await _rate(n, in_flight, handle.add_async)
    finally:
        store.close()


async def raw_sqlite(path: str, n: int, in_flight: int, run: int) -> float:
    # One connection on one dedicated thread, as aiosqlite runs it; autocommit per INSERT.
    thread = ThreadPoolExecutor(1)
    conn: sqlite3.Connection = thread.submit(
        lambda: sqlite3.connect(f"{path}.raw-{run}", isolation_level=None, check_same_thread=False)
    ).result()
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, item BLOB NOT NULL)")
    payload = _payload()
    loop = asyncio.get_running_loop()

    def insert() -> None:
        conn.execute("INSERT INTO jobs (item) VALUES (?)", (payload,))

    async def add(_: int) -> None:
        await loop.run_in_executor(thread, insert)

    try:
        return await _rate(n, in_flight, add)
    finally:
        thread.submit(conn.close).result()
        thread.shutdown()


def _measure(repeat: int, make: Callable[[int], Awaitable[float]], runs: list[int]) -> list[float]:
    rates = []
    for _ in range(repeat):
        runs[0] += 1
        rates.append(asyncio.run(make(runs[0])))  # type: ignore[arg-type]
    return rates


def _cell(rates: list[float]) -> str:
    return f"{statistics.median(rates):,.0f} ({min(rates):,.0f}-{max(rates):,.0f})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20_000, help="adds per run (default 20000)")
    parser.add_argument("--in-flight", type=int, default=100, help="calls outstanding (100)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (3)")
    args = parser.parse_args(argv)
    n, k = args.n, args.in_flight

    server = RedisServer()
    server.start()
    runs = [0]
    try:
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "jobs.db")
            load = os.getloadavg()[0]
            rq = _measure(args.repeat, lambda r: redisq_adds(server.url, n, k, r), runs)
            raw = _measure(args.repeat, lambda r: raw_lpush(server.url, n, k, r), runs)
            sq = _measure(args.repeat, lambda r: sqliteq_adds(path, n, k, r), runs)
            rawsql = _measure(args.repeat, lambda r: raw_sqlite(path, n, k, r), runs)
    finally:
        server.stop()

    print(
        f"async enqueue: {n:,} adds, {k} in flight, {args.repeat} runs (median, min-max); "
        f"Python {platform.python_version()}; {os.cpu_count()} CPUs; load {load:.2f}"
    )
    print()
    print("| Measure | varmq (adds/s) | Baseline | Baseline (adds/s) | Ratio | Target | Met |")
    print("|---|---:|---|---:|---:|---|---|")
    ratio = statistics.median(rq) / statistics.median(raw)
    met = ratio >= 0.7 and statistics.median(rq) >= 3 * BEST_PEER
    print(
        f"| redisq add_async | {_cell(rq)} | redis.asyncio LPUSH | {_cell(raw)} | {ratio:.2f}x "
        f"| >= 0.7x and >= {3 * BEST_PEER:,.0f}/s | {'yes' if met else 'NO'} |"
    )
    ratio = statistics.median(sq) / statistics.median(rawsql)
    met = statistics.median(sq) >= 20_000
    print(
        f"| sqliteq add_async | {_cell(sq)} | sqlite3 INSERT on one thread | {_cell(rawsql)} | "
        f"{ratio:.2f}x | >= 20,000/s | {'yes' if met else 'NO'} |"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
