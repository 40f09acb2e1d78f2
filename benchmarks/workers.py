"""What a worker's record in its store costs (``store.workers()``): drain with it against without.

One process, sqliteq (a file in a fresh temporary directory) and redisq (a redis-server started
here on a free loopback port, ``tests/support/redis_server.py``, never a Redis of yours). Each
round fills a distributed queue with N no-op jobs, then times a worker ``new_worker(noop, 8)``
bound to it from ``worker.start()`` to ``worker.wait()`` returning, once per side, the order of
the sides alternating from round to round:

- ``off``: no record (``WorkerRecords.bound`` made to find no registry: the tree as before);
- ``on``: the record registered at start and refreshed every 5 s (the default);
- ``on, 20/s``: refreshed every 0.05 s, to show what a refresh itself costs the drain.

Each figure is the median of the rounds with the min-max; each ratio the median of the ratios
of sides measured in the same round (paired runs). Target (issue 32): on >= 0.98x off. Run from
the repository root::

    .venv/bin/python benchmarks/workers.py              # 20,000 jobs, 7 rounds
    .venv/bin/python benchmarks/workers.py -n 5000 --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from _common import load1, machine, setup_path, spread, uptime

setup_path()

import redisq  # noqa: E402
import sqliteq  # noqa: E402
import varmq  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402
from varmq.sources import registration  # noqa: E402

SIDES = ("off", "on", "on, 20/s")


@contextmanager
def _side(name: str) -> Iterator[None]:
    """Records off, on (default refresh), or on with a refresh every 0.05 s."""
    bound, refresh = registration.WorkerRecords.bound, registration.REFRESH_SECONDS
    if name == "off":
        registration.WorkerRecords.bound = lambda self, *a: None  # type: ignore[method-assign]
    elif name == "on, 20/s":
        registration.REFRESH_SECONDS = 0.05
    try:
        yield
    finally:
        registration.WorkerRecords.bound = bound  # type: ignore[method-assign]
        registration.REFRESH_SECONDS = refresh


def _drain(store: Any, n: int, name: str) -> float:
    """Jobs per second of one drain of ``n`` no-op jobs by a worker of concurrency 8."""
    q = store.new_distributed_queue(name)
    item = b'{"id":"","status":"Created","data":0}'
    if hasattr(q, "enqueue_many"):  # redisq: a thousand per call
        for start in range(0, n, 1000):
            q.enqueue_many([item] * min(1000, n - start))
    else:
        for _ in range(n):
            q.enqueue(item)
    worker = varmq.new_worker(lambda job: None, 8, auto_run=False)
    worker.with_distributed_queue(q)
    began = time.perf_counter()
    worker.start()
    assert worker.wait(timeout=600), "the drain did not end"
    seconds = time.perf_counter() - began
    worker.stop_and_wait(30)
    assert worker.errs().empty()
    return n / seconds


def _measure(store: Any, n: int, rounds: int, label: str) -> dict[str, list[float]]:
    runs: dict[str, list[float]] = {side: [] for side in SIDES}
    for r in range(rounds):
        order = SIDES if r % 2 == 0 else tuple(reversed(SIDES))
        for side in order:
            with _side(side):
                runs[side].append(_drain(store, n, f"{label}-{r}-{side}-{time.time_ns()}"))
    return runs


def _ratios(runs: dict[str, list[float]], side: str) -> list[float]:
    return [a / b for a, b in zip(runs[side], runs["off"], strict=True)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("-n", type=int, default=20_000, help="jobs per drain (20000)")
    parser.add_argument("--rounds", type=int, default=7, help="paired rounds (7)")
    args = parser.parse_args(argv)
    loads = [load1()]
    server = RedisServer()
    server.start()
    results: list[tuple[str, dict[str, list[float]]]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            opened: list[tuple[str, Callable[[], Any]]] = [
                ("sqliteq", lambda: sqliteq.new(os.path.join(tmp, "jobs.db"))),
                ("redisq", lambda: redisq.new(server.url)),
            ]
            for label, opener in opened:
                store = opener()
                try:
                    results.append((label, _measure(store, args.n, args.rounds, label)))
                finally:
                    store.close()
                loads.append(load1())
    finally:
        server.close()
    print(f"# {machine()}; {uptime()}")
    print(f"# {args.n:,} jobs per drain, concurrency 8, {args.rounds} paired rounds")
    print(f"# 1-min load: {' -> '.join(f'{x:.2f}' for x in loads)}")
    print("| Store | off (jobs/s) | on (jobs/s) | on / off | on, 20/s (jobs/s) | 20/s / off |")
    print("|---|---|---|---|---|---|")
    for label, runs in results:
        on, fast = _ratios(runs, "on"), _ratios(runs, "on, 20/s")
        print(
            f"| {label} | {spread(runs['off'])} | {spread(runs['on'])} | "
            f"{spread(on, '.3f')} | {spread(runs['on, 20/s'])} | {spread(fast, '.3f')} |"
        )
        print(f"#   {label}: on/off median {statistics.median(on):.3f}")


if __name__ == "__main__":
    main()
