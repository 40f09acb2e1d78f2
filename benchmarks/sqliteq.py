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

Every figure is the best of 3 runs (1 with ``--quick``). Run from the repository root::

    .venv/bin/python benchmarks/sqliteq.py              # 20,000 jobs, best of 3
    .venv/bin/python benchmarks/sqliteq.py --quick      # 2,000 jobs, one run: a few seconds
    .venv/bin/python benchmarks/sqliteq.py --jobs 50000
"""

from __future__ import annotations

import argparse
import faulthandler
import gc
import os
import platform
import sqlite3
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
    args = parser.parse_args(argv)
    n = args.jobs or (2_000 if args.quick else 20_000)
    repeat = 1 if args.quick else 3
    faulthandler.dump_traceback_later(900, exit=True)

    bench = Bench(n)
    print(
        f"sqliteq benchmark: {n:,} jobs, best of {repeat}; Python {platform.python_version()}; "
        f"SQLite {sqlite3.sqlite_version}; {os.cpu_count()} CPUs; temporary files in "
        f"{tempfile.gettempdir()}"
    )
    print(f"uptime at start: {_uptime()}")
    timed(varmq_enqueue, Bench(min(n, 1_000)))  # warm-up
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
