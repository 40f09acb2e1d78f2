"""Throughput of sqliteq queues driven by varmq, against raw sqlite3 doing the same durable work.

Each figure is measured in this process, on a fresh file in a temporary directory, in the same
run as its baseline; the baseline is what a hand-written ``sqlite3`` program gets for the nearest
equivalent work (WAL, one commit per job, no leases beyond a state). Every scenario runs in
both durability modes: ``sqliteq.new(path)`` against a baseline with ``synchronous=NORMAL``,
and ``sqliteq.new(path, durable=True)`` against one with ``synchronous=FULL``:

1. enqueue: ``worker.with_persistent_queue(queues.new_queue(...)).add(None)`` N times (one
   ``BEGIN IMMEDIATE`` transaction each, envelope encoding included); baseline: one
   ``INSERT`` per job, each in its own transaction.
2. drain: N jobs stored first, then ``varmq.new_worker(noop, 8)`` with
   ``with_persistent_queue``; wall time from ``worker.start()`` to ``worker.wait()`` returning
   (batch takes, batched acks); baseline: one thread looping claim (``UPDATE ... RETURNING``
   one row in ``BEGIN IMMEDIATE``), the no-op, then ``DELETE`` of that row.
3. drain, async: the same with an ``async def`` no-op; same baseline.

Job records (``keep_results``), default durability, jobs added with ids in both columns:

4. records on vs off, single add: ``add(None, job_id=...)`` N times into a queue opened with
   ``keep_results=3600`` (bound to a result worker) against one without (a plain worker);
5. records on vs off, drain: those N jobs drained by the result worker (each outcome written
   in its acknowledgement's transaction) against the plain worker; target: records on at
   least 0.8x records off;
6. ``result_of`` latency: a waiting process adds a job with an id and waits for it with
   ``result_of``; a result worker in this process runs it and returns ``time.time()`` at the
   job's end; the latency is the waiting process's clock when ``result_of`` returned minus
   that (the settle, the watcher noticing it, the record read); p50 and p99 over
   ``LATENCY_JOBS`` jobs, one after another.

The scenario figures are the best of 3 runs (1 with ``--quick``). The records rows are 7 pairs
of runs (``--pairs``; 1 with ``--quick``), records on and off back to back in alternating
order: each figure is the median of its runs with the slowest and the fastest, and the on/off
ratio the median of the ratios within the pairs (a drain of 8 threads on a shared machine varies
by a fifth from run to run, too much for a ratio of two best runs). Run from the repository
root::

    .venv/bin/python benchmarks/sqliteq.py              # 20,000 jobs
    .venv/bin/python benchmarks/sqliteq.py --quick      # 2,000 jobs, one run: a few seconds
    .venv/bin/python benchmarks/sqliteq.py --records-only --pairs 12
    .venv/bin/python benchmarks/sqliteq.py --jobs 50000
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Run as a script, sys.path[0] is benchmarks/, where this very file would shadow the sqliteq
# package; the repository root and adapters/ are what the imports below need.
_ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _ROOT / "benchmarks"]
sys.path[:0] = [str(_ROOT), str(_ROOT / "adapters")]

import sqliteq  # noqa: E402
import varmq  # noqa: E402

CONCURRENCY = 8
"""Worker concurrency of the drain scenarios."""
KEEP = 3600.0
"""``keep_results`` of the records-on queues."""
LATENCY_JOBS = 200
"""Jobs per ``result_of`` latency run."""


def noop(job: Any) -> None:
    return None


async def async_noop(job: Any) -> None:
    return None


@dataclass
class Bench:
    """What the runs share: the job count and the payload varmq stores (the baselines reuse it)."""

    n: int
    payload: bytes = b""
    durable: bool = False  # sqliteq durable=True; the baselines use synchronous=FULL


# -- one timed run each; every function returns elapsed seconds ---------------------------------


def varmq_enqueue(bench: Bench, directory: Path) -> float:
    queues = sqliteq.new(directory / "jobs.db", durable=bench.durable)
    worker = varmq.new_worker(noop, CONCURRENCY, auto_run=False)
    try:
        stored = queues.new_queue("bench")
        add = worker.with_persistent_queue(stored).add
        gc.collect()
        start = time.perf_counter()
        for _ in range(bench.n):
            add(None)
        elapsed = time.perf_counter() - start
        _expect(len(stored), bench.n, "enqueue")
        bench.payload = stored.values()[0]
        return elapsed
    finally:
        queues.close()  # the worker never started: nothing to stop


def raw_enqueue(bench: Bench, directory: Path) -> float:
    conn = _raw_connection(directory / "raw.db", bench.durable)
    try:
        insert, payload = "INSERT INTO jobs (data, state) VALUES (?, 'ready')", bench.payload
        execute = conn.execute
        gc.collect()
        start = time.perf_counter()
        for _ in range(bench.n):
            execute(insert, (payload,))  # autocommit: one transaction per job
        elapsed = time.perf_counter() - start
        _expect(conn.execute("SELECT count(*) FROM jobs").fetchone()[0], bench.n, "raw INSERT")
        return elapsed
    finally:
        conn.close()


def _varmq_drain(bench: Bench, directory: Path, fn: Callable[[Any], Any]) -> float:
    queues = sqliteq.new(directory / "jobs.db", durable=bench.durable)
    worker = varmq.new_worker(fn, CONCURRENCY, auto_run=False)
    try:
        stored = queues.new_queue("bench")
        add = worker.with_persistent_queue(stored).add
        for _ in range(bench.n):
            add(None)
        _expect(len(stored), bench.n, "drain fill")
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


def varmq_drain(bench: Bench, directory: Path) -> float:
    return _varmq_drain(bench, directory, noop)


def varmq_drain_async(bench: Bench, directory: Path) -> float:
    return _varmq_drain(bench, directory, async_noop)


def raw_claim_delete(bench: Bench, directory: Path) -> float:
    conn = _raw_connection(directory / "raw.db", bench.durable)
    try:
        conn.execute("BEGIN")
        conn.executemany(
            "INSERT INTO jobs (data, state) VALUES (?, 'ready')", [(bench.payload,)] * bench.n
        )
        conn.execute("COMMIT")
        execute = conn.execute
        claim = (
            "UPDATE jobs SET state = 'leased' WHERE id = "
            "(SELECT id FROM jobs WHERE state = 'ready' ORDER BY id LIMIT 1) RETURNING id, data"
        )
        delete = "DELETE FROM jobs WHERE id = ?"
        done = 0
        gc.collect()
        start = time.perf_counter()
        while True:
            execute("BEGIN IMMEDIATE")
            row = execute(claim).fetchone()
            execute("COMMIT")
            if row is None:
                break
            noop(row[1])
            execute(delete, (row[0],))  # autocommit: its own transaction
            done += 1
        elapsed = time.perf_counter() - start
        _expect(done, bench.n, "raw claim+DELETE")
        return elapsed
    finally:
        conn.close()


# -- job records ------------------------------------------------------------------------------


def _records_queue(bench: Bench, directory: Path, keep: float) -> tuple[Any, Any, Any]:
    """A store, a queue with or without records, and the worker type that goes with it."""
    queues = sqliteq.new(directory / "jobs.db", durable=bench.durable)
    if keep:
        stored = queues.new_queue("bench", keep_results=keep)
        worker: Any = varmq.new_result_worker(noop, CONCURRENCY, auto_run=False)
    else:
        stored = queues.new_queue("bench")
        worker = varmq.new_worker(noop, CONCURRENCY, auto_run=False)
    return queues, stored, worker


def records_enqueue(bench: Bench, directory: Path, keep: float) -> float:
    queues, stored, worker = _records_queue(bench, directory, keep)
    try:
        add = worker.with_persistent_queue(stored).add
        ids = [f"job-{i}" for i in range(bench.n)]
        gc.collect()
        start = time.perf_counter()
        for job_id in ids:
            add(None, job_id=job_id)
        elapsed = time.perf_counter() - start
        _expect(len(stored), bench.n, "records enqueue")
        return elapsed
    finally:
        queues.close()


def records_drain(bench: Bench, directory: Path, keep: float) -> float:
    queues, stored, worker = _records_queue(bench, directory, keep)
    try:
        add = worker.with_persistent_queue(stored).add
        for i in range(bench.n):
            add(None, job_id=f"job-{i}")
        gc.collect()
        start = time.perf_counter()
        worker.start()
        worker.wait()
        elapsed = time.perf_counter() - start
        _expect(worker.metrics.completed, bench.n, "records drain: jobs completed")
        if keep:
            record = stored.job_record(f"job-{bench.n - 1}")
            _expect(int(record is not None and record["state"] == "succeeded"), 1, "a record")
        return elapsed
    finally:
        worker.stop_and_wait()
        queues.close()


def stamp_end(job: Any) -> dict[str, float]:
    return {"t": time.time()}


def result_of_latency(directory: Path, jobs: int) -> list[float]:
    """Seconds from each job's end (in this process) to ``result_of`` returning in another."""
    path = directory / "jobs.db"
    queues = sqliteq.new(path)
    worker: Any = varmq.new_result_worker(stamp_end, 1)
    try:
        worker.with_distributed_queue(queues.new_distributed_queue("latency", keep_results=KEEP))
        waiter = subprocess.run(
            [sys.executable, __file__, "--result-of-waiter", str(path), str(jobs)],
            capture_output=True,
            text=True,
            check=True,
            timeout=300,
        )
        return [float(line) for line in waiter.stdout.split()]
    finally:
        worker.stop_and_wait()
        queues.close()


def result_of_waiter(path: str, jobs: int) -> int:
    """The waiting process: add each job, wait for its result, print the latency."""
    queues = sqliteq.new(path)
    handle = varmq.new_distributed_queue(queues.new_distributed_queue("latency", keep_results=KEEP))
    latencies = []
    for i in range(jobs):
        assert handle.add(i, job_id=f"lat-{i}", strict=True)
        ended = handle.result_of(f"lat-{i}", timeout=60)["t"]
        latencies.append(time.time() - ended)
    queues.close()
    print("\n".join(f"{seconds:.6f}" for seconds in latencies))
    return 0


def _spread(values: list[float], form: str = ",.0f") -> str:
    ordered = sorted(values)
    return f"{statistics.median(ordered):{form}} ({ordered[0]:{form}}..{ordered[-1]:{form}})"


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def _raw_connection(path: Path, durable: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = FULL" if durable else "PRAGMA synchronous = NORMAL")
    conn.execute(
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY, data BLOB NOT NULL, state TEXT NOT NULL)"
    )
    conn.execute("CREATE INDEX jobs_state ON jobs (state, id)")
    return conn


def _expect(got: int, want: int, what: str) -> None:
    if got != want:
        raise SystemExit(f"benchmark error: {what}: {got}, expected {want}")


# -- running and printing -----------------------------------------------------------------------

Run = Callable[[Bench, Path], float]


@dataclass
class Scenario:
    name: str
    varmq: Run
    baseline: Run
    baseline_name: str


SCENARIOS = [
    Scenario("enqueue (single add)", varmq_enqueue, raw_enqueue, "INSERT, own transaction"),
    Scenario(f"drain, c={CONCURRENCY}", varmq_drain, raw_claim_delete, "claim + DELETE, 1 thread"),
    Scenario(
        f"drain, c={CONCURRENCY}, async def",
        varmq_drain_async,
        raw_claim_delete,
        "claim + DELETE, 1 thread",
    ),
]


def timed(run: Run, bench: Bench) -> float:
    """One run on a fresh file in a fresh temporary directory."""
    with tempfile.TemporaryDirectory(prefix="sqliteq-bench-") as directory:
        return run(bench, Path(directory))


def _uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        load = os.getloadavg()
        return f"load average: {load[0]:.2f}, {load[1]:.2f}, {load[2]:.2f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=None, help="jobs per run (default 20000)")
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, one run per figure")
    parser.add_argument(
        "--pairs", type=int, default=7, help="record on/off pairs of runs (default 7)"
    )
    parser.add_argument("--records-only", action="store_true", help="the job-record rows only")
    parser.add_argument("--result-of-waiter", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.result_of_waiter:
        return result_of_waiter(args.result_of_waiter[0], int(args.result_of_waiter[1]))
    n = args.jobs or (2_000 if args.quick else 20_000)
    repeat = 1 if args.quick else 3
    faulthandler.dump_traceback_later(900, exit=True)

    print(
        f"sqliteq benchmark: {n:,} jobs; Python {platform.python_version()}; "
        f"SQLite {sqlite3.sqlite_version}; {os.cpu_count()} CPUs; temporary files in "
        f"{tempfile.gettempdir()}"
    )
    timed(varmq_enqueue, Bench(min(n, 1_000)))  # warm-up
    if not args.records_only:
        _scenario_rows(n, repeat)
    _records_rows(n, 1 if args.quick else args.pairs)
    return 0


def _scenario_rows(n: int, repeat: int) -> None:
    """The scenarios against their raw sqlite3 baselines, in both durability modes."""
    bench = Bench(n)
    print(f"best of {repeat}; uptime at start: {_uptime()}")
    timed(varmq_enqueue, bench)  # the payload every baseline stores
    print(f"payload: {len(bench.payload)} bytes {bench.payload!r}")
    best: dict[tuple[str, bool, str], float] = {}
    for _ in range(repeat):  # varmq and baseline alternate, so both see the same load
        for durable in (False, True):
            run_bench = Bench(n, bench.payload, durable)
            for scenario in SCENARIOS:
                for side, run in (("varmq", scenario.varmq), ("baseline", scenario.baseline)):
                    elapsed = timed(run, run_bench)
                    key = (scenario.name, durable, side)
                    best[key] = min(best.get(key, elapsed), elapsed)
    print(f"uptime at end:   {_uptime()}")
    print()
    print("| Scenario | Mode | varmq + sqliteq (jobs/s) | Baseline | Baseline (jobs/s) | Ratio |")
    print("|---|---|---:|---|---:|---:|")
    for durable in (False, True):
        mode = "durable=True (FULL)" if durable else "default (NORMAL)"
        for scenario in SCENARIOS:
            rate = n / best[scenario.name, durable, "varmq"]
            base = n / best[scenario.name, durable, "baseline"]
            print(
                f"| {scenario.name} | {mode} | {rate:,.0f} | {scenario.baseline_name} | "
                f"{base:,.0f} | {rate / base:.2f} |"
            )


def _records_rows(n: int, pairs: int) -> None:
    """The job-record rows: on against off in pairs (one run each, back to back, the order
    alternating), then result_of latency. A drain of 8 threads on a shared machine varies by a
    fifth from run to run, so each figure is the median of its runs, and the on/off ratio the
    median of the ratios within each pair."""
    print(f"records: uptime at start: {_uptime()}")
    runs: dict[tuple[str, bool], list[float]] = {}
    latencies: list[list[float]] = []
    scenarios = (("single add", records_enqueue), (f"drain, c={CONCURRENCY}", records_drain))
    for i in range(pairs):
        for name, run in scenarios:
            for on in (True, False) if i % 2 == 0 else (False, True):
                with tempfile.TemporaryDirectory(prefix="sqliteq-bench-") as directory:
                    elapsed = run(Bench(n), Path(directory), KEEP if on else 0.0)
                runs.setdefault((name, on), []).append(n / elapsed)
        if i < 3:
            with tempfile.TemporaryDirectory(prefix="sqliteq-bench-") as directory:
                latencies.append(result_of_latency(Path(directory), LATENCY_JOBS))
    print(f"records: uptime at end:   {_uptime()}")
    print()
    print(f"Job records (keep_results={KEEP:g}), default mode, {n:,} jobs with ids; pairs of")
    print(f"runs (records on, records off): {pairs}; median (slowest..fastest):")
    print()
    print("| Scenario | Records on (jobs/s) | Records off (jobs/s) | On/off, paired |")
    print("|---|---:|---:|---:|")
    for name, _ in scenarios:
        on, off = runs[name, True], runs[name, False]
        ratios = [a / b for a, b in zip(on, off, strict=True)]
        print(f"| {name} | {_spread(on)} | {_spread(off)} | {_spread(ratios, '.2f')} |")
    print()
    print(f"result_of latency, job end to the waiting process, {LATENCY_JOBS} jobs per run (ms):")
    print()
    print("| Run | p50 | p99 | max |")
    print("|---|---:|---:|---:|")
    for i, run_latencies in enumerate(latencies, 1):
        p50, p99 = (_percentile(run_latencies, f) * 1000 for f in (0.5, 0.99))
        print(f"| {i} | {p50:.1f} | {p99:.1f} | {max(run_latencies) * 1000:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
