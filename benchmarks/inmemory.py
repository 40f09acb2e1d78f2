"""In-memory throughput of varmq workers, against the standard library doing the same work.

Four scenarios, each measured in this process and this run, varmq and baseline alternating:

1. fire-and-forget: ``new_worker(noop, c)`` + ``bind_queue()``, add N jobs, ``worker.wait()``;
   baseline ``ThreadPoolExecutor(c)``: ``submit(noop)`` N times, ``shutdown(wait=True)``.
2. round trip: ``new_result_worker``, ``add(i).result()`` one job at a time;
   baseline ``executor.submit(f, i).result()``.
3. priority vs FIFO: fire-and-forget through ``bind_priority_queue()`` (priority ``i % 10``);
   baseline: the same through ``bind_queue()``.
4. async: an ``async def`` no-op worker, add N jobs, ``worker.wait()``;
   baseline ``asyncio.gather`` of N coroutines, each under an ``asyncio.Semaphore(c)``.

Every figure is the best of ``--repeat`` runs (default 3). Run it with::

    python benchmarks/inmemory.py                 # 200,000 jobs, concurrency 1, 4, 10
    python benchmarks/inmemory.py --quick         # a small run, a few seconds
    python benchmarks/inmemory.py -n 50000 --round-trip-n 5000 -c 1 -c 10
"""

from __future__ import annotations

import argparse
import asyncio
import faulthandler
import gc
import os
import platform
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import varmq


def noop(job: Any) -> None:
    return None


def identity(job: Any) -> Any:
    return job.data


def plain_noop() -> None:
    return None


def plain_identity(x: int) -> int:
    return x


async def async_noop(job: Any) -> None:
    return None


# -- one timed run each; every function returns elapsed seconds ------------------------------


def varmq_fire_and_forget(n: int, c: int) -> float:
    worker = varmq.new_worker(noop, c)
    queue = worker.bind_queue()
    add = queue.add
    start = time.perf_counter()
    for _ in range(n):
        add(None)
    worker.wait()
    elapsed = time.perf_counter() - start
    _check(worker, n)
    return elapsed


def executor_fire_and_forget(n: int, c: int) -> float:
    executor = ThreadPoolExecutor(c)
    submit = executor.submit
    start = time.perf_counter()
    for _ in range(n):
        submit(plain_noop)
    executor.shutdown(wait=True)
    return time.perf_counter() - start


def varmq_round_trip(n: int, c: int) -> float:
    worker = varmq.new_result_worker(identity, c)
    queue = worker.bind_queue()
    add = queue.add
    start = time.perf_counter()
    for i in range(n):
        job = add(i)
        assert job is not None and job.result() == i
    elapsed = time.perf_counter() - start
    _check(worker, n)
    return elapsed


def executor_round_trip(n: int, c: int) -> float:
    executor = ThreadPoolExecutor(c)
    submit = executor.submit
    start = time.perf_counter()
    for i in range(n):
        assert submit(plain_identity, i).result() == i
    elapsed = time.perf_counter() - start
    executor.shutdown(wait=True)
    return elapsed


def varmq_priority(n: int, c: int) -> float:
    worker = varmq.new_worker(noop, c)
    queue = worker.bind_priority_queue()
    add = queue.add
    start = time.perf_counter()
    for i in range(n):
        add(None, i % 10)
    worker.wait()
    elapsed = time.perf_counter() - start
    _check(worker, n)
    return elapsed


def varmq_async(n: int, c: int) -> float:
    worker = varmq.new_worker(async_noop, c)
    queue = worker.bind_queue()
    add = queue.add
    start = time.perf_counter()
    for _ in range(n):
        add(None)
    worker.wait()
    elapsed = time.perf_counter() - start
    _check(worker, n)
    return elapsed


def gather_async(n: int, c: int) -> float:
    async def main() -> float:
        semaphore = asyncio.Semaphore(c)

        async def one() -> None:
            async with semaphore:
                await async_noop(None)

        start = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        return time.perf_counter() - start

    return asyncio.run(main())


def _check(worker: varmq.BaseWorker[Any, Any, Any], n: int) -> None:
    completed = worker.metrics.completed
    worker.stop_and_wait()
    if completed != n:
        raise SystemExit(f"benchmark error: {completed} of {n} jobs completed")


# -- running and printing ----------------------------------------------------------------------

Run = Callable[[int, int], float]


@dataclass
class Scenario:
    name: str
    varmq: Run
    baseline: Run
    baseline_name: str
    round_trip: bool
    # Target for varmq/baseline at the given concurrency (None: every concurrency), if any.
    target: float | None = None
    target_at: int | None = None


SCENARIOS = [
    Scenario(
        "fire-and-forget",
        varmq_fire_and_forget,
        executor_fire_and_forget,
        "ThreadPoolExecutor",
        round_trip=False,
        target=1.5,
        target_at=10,
    ),
    Scenario(
        "round trip",
        varmq_round_trip,
        executor_round_trip,
        "ThreadPoolExecutor",
        round_trip=True,
        target=1.0,
    ),
    Scenario(
        "priority vs FIFO",
        varmq_priority,
        varmq_fire_and_forget,
        "varmq FIFO",
        round_trip=False,
        target=1 / 1.25,
    ),
    Scenario(
        "async",
        varmq_async,
        gather_async,
        "asyncio.gather+Semaphore",
        round_trip=False,
    ),
]


# A run that takes longer than this is stuck: print every thread's stack and exit.
WATCHDOG = 300.0


def timed(run: Run, n: int, c: int) -> float:
    gc.collect()
    faulthandler.dump_traceback_later(WATCHDOG, exit=True)
    try:
        return run(n, c)
    finally:
        faulthandler.cancel_dump_traceback_later()


def measure(scenario: Scenario, n: int, c: int, repeat: int) -> tuple[float, float]:
    """Best (shortest) time of each side over ``repeat`` runs, alternating which goes first."""
    ours: list[float] = []
    theirs: list[float] = []
    for i in range(repeat):
        if i % 2 == 0:
            ours.append(timed(scenario.varmq, n, c))
            theirs.append(timed(scenario.baseline, n, c))
        else:
            theirs.append(timed(scenario.baseline, n, c))
            ours.append(timed(scenario.varmq, n, c))
    return min(ours), min(theirs)


def target_text(scenario: Scenario, c: int, ratio: float) -> str:
    if scenario.target is None:
        return ""
    if scenario.target_at is not None and c != scenario.target_at:
        return ""
    met = "met" if ratio >= scenario.target else "MISSED"
    return f">= {scenario.target:.2f} {met}"


def print_load(when: str) -> None:
    """The 1, 5 and 15 minute load averages, where the system has them."""
    try:
        one, five, fifteen = os.getloadavg()
    except (AttributeError, OSError):
        return
    print(f"load average {when}: {one:.2f} {five:.2f} {fifteen:.2f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200_000, help="jobs per run (default 200000)")
    parser.add_argument(
        "--round-trip-n",
        type=int,
        default=20_000,
        help="jobs per round-trip run, one at a time (default 20000)",
    )
    parser.add_argument(
        "-c",
        "--concurrency",
        type=int,
        action="append",
        help="concurrency to measure; repeat the option for several (default 1, 4, 10)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure, best kept")
    parser.add_argument(
        "--quick", action="store_true", help="small run: 5000 jobs, 1000 round trips, 1 repeat"
    )
    parser.add_argument(
        "--only", action="append", help="run only scenarios whose name contains this"
    )
    args = parser.parse_args(argv)
    n, rt_n, repeat = args.n, args.round_trip_n, args.repeat
    if args.quick:
        n, rt_n, repeat = 5_000, 1_000, 1
    concurrencies = args.concurrency or [1, 4, 10]

    print(
        f"varmq in-memory benchmark: Python {platform.python_version()} "
        f"({platform.python_implementation()}, {platform.system()} {platform.machine()}), "
        f"{os.cpu_count()} CPUs, best of {repeat}"
    )
    print_load("at start")
    print()
    header = (
        f"| {'scenario':<16} | {'baseline':<24} | {'c':>3} | {'N':>7} | {'varmq jobs/s':>12} "
        f"| {'baseline jobs/s':>15} | {'ratio':>5} | {'target':<12} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(cell)) for cell in header.split("|")[1:-1]) + "|")
    for scenario in SCENARIOS:
        if args.only and not any(o in scenario.name for o in args.only):
            continue
        size = rt_n if scenario.round_trip else n
        for c in concurrencies:
            ours, theirs = measure(scenario, size, c, repeat)
            ratio = theirs / ours
            print(
                f"| {scenario.name:<16} | {scenario.baseline_name:<24} | {c:>3} | {size:>7} "
                f"| {size / ours:>12,.0f} | {size / theirs:>15,.0f} | {ratio:>5.3f} "
                f"| {target_text(scenario, c, ratio):<12} |",
                flush=True,
            )
    print()
    print_load("at end")
    print("ratio = varmq jobs/s / baseline jobs/s (higher is better for varmq).")
    print("priority vs FIFO: the baseline is varmq's own FIFO queue; the target ratio 0.80")
    print("means priority takes at most 1.25x the time of FIFO.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
