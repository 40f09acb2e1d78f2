"""Throughput of redisq queues driven by varmq, against raw redis-py doing the same on one server.

Three figures, each measured in this process, on the same Redis, in the same run; the baseline is
what a hand-written redis-py program gets for the nearest equivalent work (no leases, no
at-least-once):

1. single add: ``varmq.new_distributed_queue(queues.new_distributed_queue(...)).add(None)`` N
   times (one EVALSHA each, envelope encoding included); baseline: an unpipelined ``LPUSH`` loop
   of the same bytes.
2. batch add: ``queue.enqueue_many(payloads)`` (redisq's batch path, 1,000 payloads per script
   call); baseline: ``LPUSH`` of every payload in one non-transactional pipeline.
3. drain: N jobs stored first, then ``varmq.new_worker(noop, C)`` with
   ``with_distributed_queue``; wall time from ``worker.start()`` to ``worker.wait()`` (batch
   takes, batched acks); baseline: one thread looping ``LMOVE`` to a processing list, then
   ``LREM`` from it (the classic reliable-queue pattern), unpipelined.

Then job records (``keep_results``), each row measured ``--repeat`` times with its spread:

4. records on vs off, single add: ``handle.add(None, job_id=...)`` N times on a queue opened
   with ``keep_results=3600`` against the same adds (ids included) on one without records;
   target: records on >= 0.8x records off, paired run by run.
5. records on vs off, drain: N jobs added with ids, drained by ``varmq.new_result_worker`` on
   the queue with records (every acknowledgement writes the job's outcome in the same script
   call) against ``varmq.new_worker`` on the queue without; target >= 0.8x.
6. ``result_of`` latency: a second process adds a job with an id and waits for it with
   ``result_of``; a result worker here runs it (10 ms of work) and its end reaches the waiting
   process through the queue's "ended" pub/sub channel. Latency: when ``result_of`` returned in
   the waiting process minus the record's ``finished_at`` (both on this host's clock: the Redis
   server runs here). 200 jobs per run; p50 and p99; target p50 < 5 ms.

The first three figures are the best of ``--repeat`` runs (default 3). Redis: a redis-server
started here on a free loopback port (``tests/support/redis_server.py``), or the database
``VARMQ_TEST_REDIS_URL`` names, which is flushed, so it must be empty
(``tests/support/redis_database.py``). Run from the repository root::

    .venv/bin/python benchmarks/redisq.py              # 20,000 jobs, concurrency 8
    .venv/bin/python benchmarks/redisq.py -n 2000 --repeat 1        # a quick look
    .venv/bin/python benchmarks/redisq.py --records-only           # rows 4-6 only
    VARMQ_TEST_REDIS_URL=redis://127.0.0.1:6380/15 .venv/bin/python benchmarks/redisq.py
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Run as a script, sys.path[0] is benchmarks/, where this very file would shadow the redisq
# package; the repository root is what the imports below need (redisq, varmq, tests.support).
_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "benchmarks"]
sys.path.insert(0, str(_ROOT))

import redis  # noqa: E402

import redisq  # noqa: E402
import varmq  # noqa: E402
from tests.support.redis_database import SuiteDatabase  # noqa: E402
from tests.support.redis_server import RedisServer, external_url  # noqa: E402

DRAIN_TARGET = 10_000.0
"""Jobs per second the drain must reach."""
SINGLE_ADD_TARGET = 0.8
"""Single adds must reach this share of the raw unpipelined LPUSH rate."""
RECORDS_TARGET = 0.8
"""With records on, single adds and drains must reach this share of the rate with them off."""
LATENCY_P50_TARGET_MS = 5.0
"""Median time from a job's end to ``result_of`` returning in another process."""
KEEP = 3600.0
"""``keep_results`` of the queues with records."""
LATENCY_JOBS = 200
LATENCY_WORK = 0.01


def noop(job: Any) -> None:
    return None


@dataclass
class Bench:
    """One Redis and what the runs share."""

    url: str
    n: int
    concurrency: int
    payload: bytes = b""
    runs: int = 0

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url)

    def fresh_name(self) -> str:
        self.runs += 1
        return f"bench-{self.runs}"

    def flush(self) -> None:
        # only a database it found empty, holding nothing but queue and baseline keys since
        SuiteDatabase(self.url, prefixes=("redisq:", "raw:")).flush()


# -- one timed run each; every function returns elapsed seconds ---------------------------------


def varmq_single_add(bench: Bench) -> float:
    queues = redisq.new(bench.url)
    try:
        stored = queues.new_distributed_queue(bench.fresh_name())
        handle = varmq.new_distributed_queue(stored)
        add = handle.add
        start = time.perf_counter()
        for _ in range(bench.n):
            add(None)
        elapsed = time.perf_counter() - start
        _expect(len(stored), bench.n, "single add")
        bench.payload = stored.values()[0]
        return elapsed
    finally:
        queues.close()
        bench.flush()


def raw_single_lpush(bench: Bench) -> float:
    with bench.client() as client:
        lpush, key, payload = client.lpush, f"raw:{bench.fresh_name()}", bench.payload
        start = time.perf_counter()
        for _ in range(bench.n):
            lpush(key, payload)
        elapsed = time.perf_counter() - start
        _expect(client.llen(key), bench.n, "raw LPUSH")
    bench.flush()
    return elapsed


def varmq_batch_add(bench: Bench) -> float:
    queues = redisq.new(bench.url)
    try:
        stored = queues.new_distributed_queue(bench.fresh_name())
        payloads = [bench.payload] * bench.n
        start = time.perf_counter()
        count = stored.enqueue_many(payloads)
        elapsed = time.perf_counter() - start
        _expect(count, bench.n, "enqueue_many")
        return elapsed
    finally:
        queues.close()
        bench.flush()


def raw_pipelined_lpush(bench: Bench) -> float:
    with bench.client() as client:
        key, payload = f"raw:{bench.fresh_name()}", bench.payload
        start = time.perf_counter()
        pipe = client.pipeline(transaction=False)
        for _ in range(bench.n):
            pipe.lpush(key, payload)
        pipe.execute()
        elapsed = time.perf_counter() - start
        _expect(client.llen(key), bench.n, "raw pipelined LPUSH")
    bench.flush()
    return elapsed


def varmq_drain(bench: Bench) -> float:
    queues = redisq.new(bench.url)
    worker = varmq.new_worker(noop, bench.concurrency, auto_run=False)
    try:
        stored = queues.new_distributed_queue(bench.fresh_name())
        _expect(stored.enqueue_many([bench.payload] * bench.n), bench.n, "drain fill")
        worker.with_distributed_queue(stored)
        gc.collect()
        start = time.perf_counter()
        worker.start()
        worker.wait()
        elapsed = time.perf_counter() - start
        _expect(worker.metrics.completed, bench.n, "drain: jobs completed")
        _expect(len(stored), 0, "drain: jobs left waiting")
        return elapsed
    finally:
        worker.stop_and_wait()
        queues.close()
        bench.flush()


def raw_lmove_lrem(bench: Bench) -> float:
    with bench.client() as client:
        name = bench.fresh_name()
        source, processing = f"raw:{{{name}}}:ready", f"raw:{{{name}}}:processing"
        pipe = client.pipeline(transaction=False)
        for _ in range(bench.n):
            pipe.lpush(source, bench.payload)
        pipe.execute()
        lmove, lrem = client.lmove, client.lrem
        done = 0
        start = time.perf_counter()
        while True:
            item = lmove(source, processing, "RIGHT", "LEFT")
            if item is None:
                break
            noop(item)
            lrem(processing, 1, item)
            done += 1
        elapsed = time.perf_counter() - start
        _expect(done, bench.n, "raw LMOVE+LREM")
    bench.flush()
    return elapsed


# -- job records ---------------------------------------------------------------------------------


def records_single_add(bench: Bench, keep: float) -> float:
    queues = redisq.new(bench.url)
    try:
        stored = queues.new_distributed_queue(bench.fresh_name(), keep_results=keep)
        add = varmq.new_distributed_queue(stored).add
        ids = [f"job-{i}" for i in range(bench.n)]
        start = time.perf_counter()
        for job_id in ids:
            add(None, job_id=job_id)
        elapsed = time.perf_counter() - start
        _expect(len(stored), bench.n, f"single add, keep_results={keep:g}")
        return elapsed
    finally:
        queues.close()
        bench.flush()


def records_drain(bench: Bench, keep: float) -> float:
    queues = redisq.new(bench.url)
    make = varmq.new_result_worker if keep > 0 else varmq.new_worker
    worker = make(noop, bench.concurrency, auto_run=False)
    try:
        stored = queues.new_distributed_queue(bench.fresh_name(), keep_results=keep)
        for i in range(bench.n):
            stored.enqueue_dedup(bench.payload, f"job-{i}")
        _expect(len(stored), bench.n, "drain fill with ids")
        worker.with_distributed_queue(stored)
        gc.collect()
        start = time.perf_counter()
        worker.start()
        worker.wait()
        elapsed = time.perf_counter() - start
        _expect(worker.metrics.completed, bench.n, f"drain, keep_results={keep:g}")
        if keep > 0:
            record = stored.job_record(f"job-{bench.n - 1}")
            assert record is not None and record["state"] == "succeeded", record
        return elapsed
    finally:
        worker.stop_and_wait()
        queues.close()
        bench.flush()


def _work(job: Any) -> str:
    time.sleep(LATENCY_WORK)
    return "done"


def result_of_latencies(bench: Bench) -> list[float]:
    """Seconds from each job's end to ``result_of`` returning in another process."""
    queues = redisq.new(bench.url)
    worker: varmq.ResultWorker[Any, Any] = varmq.new_result_worker(_work, 4)
    name = bench.fresh_name()
    try:
        worker.with_distributed_queue(queues.new_distributed_queue(name, keep_results=KEEP))
        waiter = subprocess.run(
            [sys.executable, __file__, "--waiter", bench.url, name, str(LATENCY_JOBS)],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
        )
        latencies = [float(x) for x in json.loads(waiter.stdout)]
        _expect(len(latencies), LATENCY_JOBS, "result_of latencies")
        return latencies
    finally:
        worker.stop_and_wait()
        queues.close()
        bench.flush()


def waiter(url: str, name: str, count: int) -> None:
    """The waiting process of :func:`result_of_latencies`: add a job, wait for it, note how
    long after its end ``result_of`` returned; print the list as JSON."""
    queues = redisq.new(url)
    handle = varmq.new_distributed_queue(queues.new_distributed_queue(name, keep_results=KEEP))
    latencies = []
    for i in range(count):
        job_id = f"latency-{i}"
        handle.add(None, job_id=job_id, strict=True)
        if handle.result_of(job_id, timeout=30) != "done":
            raise SystemExit(f"benchmark error: wrong result for {job_id}")
        returned = time.time()
        record = handle.job(job_id)
        assert record is not None and record.finished_at is not None
        latencies.append(returned - record.finished_at)
    queues.close()
    print(json.dumps(latencies))


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def _spread(values: list[float], fmt: str) -> str:
    """``median (min-max)`` of the runs."""
    mid = statistics.median(values)
    if len(values) == 1:
        return format(mid, fmt)
    return f"{format(mid, fmt)} ({format(min(values), fmt)}-{format(max(values), fmt)})"


def records_rows(bench: Bench, repeat: int) -> None:
    """Rows 4-6: records on vs off (paired run by run) and the result_of latency."""
    print()
    print("| Scenario | Records off (jobs/s) | Records on (jobs/s) | On / off | Target | Met |")
    print("|---|---:|---:|---:|---|---|")
    runs: list[tuple[str, Callable[[Bench, float], float]]] = [
        ("single add with ids", records_single_add),
        (f"drain with ids, c={bench.concurrency}", records_drain),
    ]
    for title, run in runs:
        offs, ons = [], []
        for _ in range(repeat):
            offs.append(bench.n / run(bench, 0.0))
            ons.append(bench.n / run(bench, KEEP))
        ratios = [on / off for on, off in zip(ons, offs, strict=True)]
        met = "yes" if statistics.median(ratios) >= RECORDS_TARGET else "NO"
        print(
            f"| {title} | {_spread(offs, ',.0f')} | {_spread(ons, ',.0f')} | "
            f"{_spread(ratios, '.2f')} | >= {RECORDS_TARGET:.2f} | {met} |"
        )
    p50s, p99s = [], []
    for _ in range(repeat):
        latencies = result_of_latencies(bench)
        p50s.append(_percentile(latencies, 0.5) * 1000)
        p99s.append(_percentile(latencies, 0.99) * 1000)
    met = "yes" if statistics.median(p50s) < LATENCY_P50_TARGET_MS else "NO"
    print()
    print("| Scenario | p50 (ms) | p99 (ms) | Target | Met |")
    print("|---|---:|---:|---|---|")
    print(
        f"| result_of, job end to a waiting process ({LATENCY_JOBS} jobs a run) | "
        f"{_spread(p50s, '.2f')} | {_spread(p99s, '.2f')} | p50 < {LATENCY_P50_TARGET_MS:g} | "
        f"{met} |"
    )


def _expect(got: int, want: int, what: str) -> None:
    if got != want:
        raise SystemExit(f"benchmark error: {what}: {got}, expected {want}")


# -- running and printing -----------------------------------------------------------------------

Run = Callable[[Bench], float]


@dataclass
class Scenario:
    name: str
    varmq: Run
    baseline: Run
    baseline_name: str
    target: str
    meets: Callable[[float, float], bool]


SCENARIOS = [
    Scenario(
        "single add",
        varmq_single_add,
        raw_single_lpush,
        "LPUSH, unpipelined",
        f"ratio >= {SINGLE_ADD_TARGET:.2f}",
        lambda rate, base: rate >= SINGLE_ADD_TARGET * base,
    ),
    Scenario(
        "batch add (enqueue_many)",
        varmq_batch_add,
        raw_pipelined_lpush,
        "LPUSH, one pipeline",
        "none",
        lambda rate, base: True,
    ),
    Scenario(
        "drain, c=8",
        varmq_drain,
        raw_lmove_lrem,
        "LMOVE+LREM, unpipelined",
        f">= {DRAIN_TARGET:,.0f} jobs/s",
        lambda rate, base: rate >= DRAIN_TARGET,
    ),
]


def best_rate(run: Run, bench: Bench, repeat: int) -> float:
    return bench.n / min(run(bench) for _ in range(repeat))


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        load = os.getloadavg()
        return f"load average: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}"


def _redis_version(url: str) -> str:
    with redis.Redis.from_url(url) as client:
        return str(client.info("server").get("redis_version", "?"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20_000, help="jobs per run (default 20000)")
    parser.add_argument("-c", "--concurrency", type=int, default=8, help="worker concurrency")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; best kept")
    parser.add_argument("--records-only", action="store_true", help="only rows 4-6 (records)")
    parser.add_argument(
        "--waiter", nargs=3, metavar=("URL", "QUEUE", "COUNT"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.waiter:
        waiter(args.waiter[0], args.waiter[1], int(args.waiter[2]))
        return 0
    faulthandler.dump_traceback_later(600, exit=True)

    server = None
    url = external_url()
    if url is None:
        server = RedisServer()
        server.start()
        url = server.url
    try:
        SuiteDatabase(url).claim()
        bench = Bench(url, args.n, args.concurrency)
        print(
            f"redisq benchmark: {args.n:,} jobs, concurrency {args.concurrency}, best of "
            f"{args.repeat}; Redis {_redis_version(url)} at {url}; Python "
            f"{platform.python_version()}; {os.cpu_count()} CPUs"
        )
        print(f"uptime at start: {_uptime()}")
        bench.flush()
        varmq_single_add(bench)  # warm-up, and the payload every run uses
        print(f"payload: {len(bench.payload)} bytes {bench.payload!r}")
        rows = []
        for scenario in [] if args.records_only else SCENARIOS:
            rate = best_rate(scenario.varmq, bench, args.repeat)
            base = best_rate(scenario.baseline, bench, args.repeat)
            rows.append((scenario, rate, base))
        if rows:
            print()
            print(
                "| Scenario | varmq + redisq (jobs/s) | Baseline | Baseline (jobs/s) | Ratio | "
                "Target | Met |"
            )
            print("|---|---:|---|---:|---:|---|---|")
        for scenario, rate, base in rows:
            met = "yes" if scenario.meets(rate, base) else "NO"
            print(
                f"| {scenario.name} | {rate:,.0f} | {scenario.baseline_name} | {base:,.0f} | "
                f"{rate / base:.2f} | {scenario.target} | {met} |"
            )
        records_rows(bench, args.repeat)
        print()
        print(f"uptime at end:   {_uptime()}")
    finally:
        if server is not None:
            server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
