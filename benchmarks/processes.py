"""``varmq worker MODULE:ATTR --processes 2`` against ``--processes 1``, run as deployed.

Every run starts the real command (``python -m varmq worker varmq_bench_jobs:make --processes
N``, the module written to a scratch directory) on a queue filled beforehand, lets it drain,
sends it SIGTERM and checks that it exits 0. Each job appends one fixed-size record to a file
(``os.write`` on an ``O_APPEND`` descriptor): its start and end (``time.time_ns``), the CPU its
thread spent on it (``time.thread_time_ns``) and its process id. The parent runs no job; it
waits for the records, then reads the times from them. The command's processes keep compiled
modules (``PYTHONPYCACHEPREFIX`` in the scratch directory), as an installed package has them;
``--no-pycache`` leaves ``PYTHONDONTWRITEBYTECODE`` as the environment has it.

Measures (``--only`` picks by kind and adapter):

- ``cpu``: 400 jobs of about 4 ms of pure Python each (a loop calibrated in this process),
  concurrency 2 per process: ``--processes 2`` against ``--processes 1`` (target >= 1.7x);
  for scale, one process at concurrency 4 (as many threads as the two processes together)
  and one process running the same job as ``async def`` at concurrency 2, against the same
  baseline.
- ``noop``: 20,000 jobs that only write their record, concurrency 8 per process:
  ``--processes 2`` against ``--processes 1`` (target >= 1.2x); one process at concurrency 16
  and ``async def`` at 8 for scale.
- ``startup``: 100 jobs of a 20 ms sleep stored, then the command started: from just before
  ``Popen`` to the start of the first job, ``--processes 2`` against ``--processes 1``
  (target <= 2x); also when every process had started a job, and, from the command's log
  lines at ``--log-level info``, when the supervisor started its first child and when a
  process had built its worker. One start-up of each side first is not counted (it fills
  the bytecode cache). Then the supervisor's imports, timed by ``python -X importtime``.

The drain is timed without the interpreters' start-up: from the moment every process of the
command has finished a job (the latest of the processes' first ends) to the last job's end,
over the jobs that ended in that window. The parent also samples ``/proc`` every 10 ms, and
for the same window reports the CPU the command's processes, redis-server, this process and
the rest of the machine used (in cores), how the jobs split over the processes, and the job
work (jobs/s times the median CPU of one job: the cores the jobs' own code kept busy, which
does not depend on how fast this machine's CPUs happened to run during the run). On
sqliteq, one more run of the 1-process, 2-process and 16-thread sides (not in the figures)
times every write transaction in the processes: the wait for SQLite's write lock (``BEGIN
IMMEDIATE``) and the time it is held, with the long waits by length.

Each figure is repeated (5 times by default), the sides alternating which goes first; the
table gives the median of the runs, their min-max and the median of the ratios of the runs
paired with each other, with the 1-minute load average. Redis: a redis-server started here
on a free loopback port (``tests/support/redis_server.py``), never a Redis of yours. Linux
only (``/proc``). Run from the repository root::

    .venv/bin/python benchmarks/processes.py                # everything, 5 runs: about 4 minutes
    .venv/bin/python benchmarks/processes.py --quick        # fewer jobs, 2 runs: about a minute
    .venv/bin/python benchmarks/processes.py --only noop --only sqliteq
"""

from __future__ import annotations

import argparse
import faulthandler
import json
import os
import re
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import _common
from _common import Figure, load1, spread

_common.setup_path()

JOB_MS = 4.0
PROCESSES = 2
CPU_CONCURRENCY = 2
NOOP_CONCURRENCY = 8
STARTUP_JOBS = 100
STARTUP_SLEEP = 0.020
POLL = 0.010
GRACE = 10.0
TARGETS = {"cpu": 1.7, "noop": 1.2, "startup": 2.0}
MODULE = "varmq_bench_jobs"
CLOCK_TICK = os.sysconf("SC_CLK_TCK")
RECORD = len(b"%019d %019d %010d %07d\n" % (0, 0, 0, 0))

# The module the command imports (``varmq_bench_jobs:make``), written to the scratch directory:
# a factory building one consumer's worker from the spec in its environment, which the
# supervisor's children inherit.
JOBS_SOURCE = '''"""The jobs of benchmarks/processes.py; ``make`` builds one consumer's worker."""

import json
import os
import time

import varmq


def spin(loops):
    total = 0
    for i in range(loops):
        total += i * i
    return total


def make():
    spec = json.loads(os.environ["VARMQ_BENCH_SPEC"])
    if spec["adapter"] == "redisq":
        import redisq

        queues = redisq.new(spec["url"])
    else:
        import sqliteq

        queues = sqliteq.new(spec["path"])
    stored = queues.new_distributed_queue(spec["queue"])
    fd = os.open(spec["out"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    kind, loops, pause, pid = spec["kind"], spec["loops"], spec["sleep"], os.getpid()
    write, now, cpu = os.write, time.time_ns, time.thread_time_ns

    def record(started, cpu_started):
        write(fd, b"%019d %019d %010d %07d\\n" % (started, now(), cpu() - cpu_started, pid))

    if spec["async"]:

        async def job(j):
            started, cpu_started = now(), cpu()
            if kind == "cpu":
                spin(loops)
            elif kind == "sleep":
                import asyncio

                await asyncio.sleep(pause)
            record(started, cpu_started)

    else:

        def job(j):
            started, cpu_started = now(), cpu()
            if kind == "cpu":
                spin(loops)
            elif kind == "sleep":
                time.sleep(pause)
            record(started, cpu_started)

    def on_shutdown():
        queues.close()
        if lock_times is not None:
            with open(f"{spec['out']}.{pid}.lock", "w") as f:
                json.dump(lock_times, f)

    lock_times = _time_the_write_lock() if spec["lock_times"] else None
    worker = varmq.new_worker(job, spec["concurrency"], auto_run=False, on_shutdown=on_shutdown)
    worker.with_distributed_queue(stored)
    return worker


def _time_the_write_lock():
    """sqliteq only, for the diagnosis: time every write transaction of this process, split
    into the wait for SQLite's write lock (BEGIN IMMEDIATE) and the time it is held."""
    import threading

    from sqliteq import _database

    stats = {"transactions": 0, "waited_ns": 0, "held_ns": 0, "held_cpu_ns": 0}
    stats["long_waits_us"] = []  # every wait of 0.5 ms or more
    lock, local = threading.Lock(), threading.local()
    begin, transaction = _database.Database._begin_immediate, _database.Database.transaction
    clock, cpu = time.perf_counter_ns, time.thread_time_ns

    def timed_begin(self, conn):
        asked = clock()
        begin(self, conn)
        local.got, local.cpu = clock(), cpu()
        waited = local.got - asked
        with lock:
            stats["waited_ns"] += waited
            if waited >= 500_000:
                stats["long_waits_us"].append(waited // 1000)

    def timed_transaction(self, body, op="write"):
        local.got = None
        try:
            return transaction(self, body, op)
        finally:
            if local.got is not None:
                held, held_cpu = clock() - local.got, cpu() - local.cpu
                with lock:
                    stats["transactions"] += 1
                    stats["held_ns"] += held
                    stats["held_cpu_ns"] += held_cpu

    _database.Database._begin_immediate = timed_begin
    _database.Database.transaction = timed_transaction
    return stats
'''


def spin(loops: int) -> int:
    """The CPU job's loop, as in ``JOBS_SOURCE``."""
    total = 0
    for i in range(loops):
        total += i * i
    return total


def calibrate(ms: float) -> int:
    """Loops of :func:`spin` that take ``ms`` of CPU in this interpreter (best of 7)."""
    probe = 50_000
    best = min(_cpu_of(probe) for _ in range(7))
    return max(1, round(probe * ms / 1000 / best))


def _cpu_of(loops: int) -> float:
    started = time.thread_time()
    spin(loops)
    return time.thread_time() - started


# == one run of the command =====================================================================


# One look at /proc: (time_ns, machine busy s, machine total s, the command's processes s,
# redis-server s, this process s).
Sample = tuple[int, float, float, float, float, float]


@dataclass(frozen=True)
class Side:
    """How one run starts the command: processes, concurrency per process, job kind."""

    label: str
    processes: int
    concurrency: int
    is_async: bool = False


@dataclass
class Job:
    started: int
    ended: int
    cpu: int
    pid: int


@dataclass
class Run:
    """What one run of the command left: the records, the /proc samples, its exit status."""

    t0: int
    jobs: list[Job]
    samples: list[Sample]
    status: int
    load: float
    locks: list[dict[str, Any]] = field(default_factory=list)  # per process, with lock_times
    log: str = ""  # what the command wrote


@dataclass
class Drain:
    rate: float
    in_window: float  # share of the jobs that ended in the window
    shares: list[float]  # of the window's jobs, per process, largest first
    cpu_ms: float  # median thread CPU of a job
    cores: dict[str, float]  # machine, command, redis, parent, other over the window


def _proc_cpu(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICK


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except FileNotFoundError:
        return []


def _machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine, every core, from /proc/stat."""
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    total = sum(values[:8])  # guest time is already counted in user
    return (total - idle) / CLOCK_TICK, total / CLOCK_TICK


def _read_jobs(path: Path) -> list[Job]:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    jobs = []
    for line in data.splitlines():
        started, ended, cpu, pid = (int(v) for v in line.split())
        jobs.append(Job(started, ended, cpu, pid))
    return jobs


class Bench:
    def __init__(
        self, url: str, redis_pid: int, directory: Path, loops: int, pycache: bool
    ) -> None:
        self.url = url
        self.pycache = pycache
        self.redis_pid = redis_pid
        self.dir = directory
        self.loops = loops
        self.runs = 0
        self.failed_exit = ""  # the first run whose command did not exit 0 after SIGTERM
        (directory / f"{MODULE}.py").write_text(JOBS_SOURCE)

    def run(
        self,
        adapter: str,
        kind: str,
        side: Side,
        n: int,
        until: str = "all",
        sleep: float = 0.0,
        lock_times: bool = False,
        log_level: str = "warning",
    ) -> Run:
        """Fill a fresh queue with ``n`` jobs, start the command, wait for ``until`` (``all``
        jobs done, or ``each`` process started one), SIGTERM it; what the run left."""
        self.runs += 1
        name = f"bench-{self.runs}"
        out = self.dir / f"{name}.out"
        spec: dict[str, Any] = {
            "adapter": adapter,
            "queue": name,
            "out": str(out),
            "kind": kind,
            "loops": self.loops,
            "sleep": sleep,
            "async": side.is_async,
            "concurrency": side.concurrency,
            "lock_times": lock_times,
        }
        if adapter == "redisq":
            spec["url"] = self.url
        else:
            spec["path"] = str(self.dir / f"{name}.db")
        log = self.dir / f"{name}.log"
        proc = None
        try:
            self._fill(spec, n)
            env = self.env(VARMQ_BENCH_SPEC=json.dumps(spec))
            cmd = [sys.executable, "-m", "varmq", "worker", f"{MODULE}:make"]
            cmd += ["--processes", str(side.processes), "--grace", str(GRACE)]
            cmd += ["--log-level", log_level]
            samples: list[Sample] = []
            parent = os.getpid()
            with open(log, "wb") as errors:
                t0 = time.time_ns()
                proc = subprocess.Popen(
                    cmd, cwd=self.dir, env=env, stdout=errors, stderr=subprocess.STDOUT
                )
                deadline = time.monotonic() + 300
                while True:
                    busy, total = _machine_cpu()
                    tree = _proc_cpu(proc.pid) + sum(_proc_cpu(c) for c in _children(proc.pid))
                    samples.append(
                        (
                            time.time_ns(),
                            busy,
                            total,
                            tree,
                            _proc_cpu(self.redis_pid) if adapter == "redisq" else 0.0,
                            _proc_cpu(parent),
                        )
                    )
                    if until == "all":
                        done = out.exists() and out.stat().st_size >= n * RECORD
                    else:
                        done = len({j.pid for j in _read_jobs(out)}) >= side.processes
                    if done:
                        break
                    if proc.poll() is not None or time.monotonic() > deadline:
                        what = "timed out" if proc.poll() is None else f"exited {proc.returncode}"
                        raise SystemExit(
                            f"benchmark error: {side.label} on {adapter} {what} with "
                            f"{len(_read_jobs(out))} of {n} jobs done; its output:\n"
                            + log.read_text()[-3000:]
                        )
                    time.sleep(POLL)
                load = load1()
                proc.send_signal(signal.SIGTERM)
                status = proc.wait(timeout=GRACE + 60)
            if status != 0 and not self.failed_exit:
                # Reported under the table, not fatal: the figures still mean something.
                self.failed_exit = (
                    f"{side.label} on {adapter} exited {status} after SIGTERM (expected 0); "
                    f"its output at --log-level {log_level}: {log.read_text().strip()[-3000:]!r}"
                )
            jobs = _read_jobs(out)
            if until == "all" and len(jobs) != n:
                raise SystemExit(f"benchmark error: {len(jobs)} records of {n} jobs")
            locks = [json.loads(p.read_text()) for p in self.dir.glob(f"{name}.out.*.lock")]
            return Run(t0, jobs, samples, status, load, locks, log.read_text())
        finally:
            if proc is not None and proc.poll() is None:
                proc.kill()  # its children see their supervisor gone and stop
                proc.wait()
            self._cleanup(spec)
            out.unlink(missing_ok=True)
            log.unlink(missing_ok=True)
            for path in self.dir.glob(f"{name}.out.*.lock"):
                path.unlink()

    def env(self, **extra: str) -> dict[str, str]:
        """The command's environment: its import path, and the bytecode cache."""
        paths = [str(self.dir), str(_common.ROOT), str(_common.ROOT / "adapters")]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths), **extra)
        if self.pycache:
            # Compiled modules kept, as an installed package has them, outside the tree.
            env.pop("PYTHONDONTWRITEBYTECODE", None)
            env["PYTHONPYCACHEPREFIX"] = str(self.dir / "pycache")
        return env

    def supervisor_imports(self) -> str:
        """What the supervisor imports before it starts a child, timed by ``python -X
        importtime`` (best of 5), beside a bare interpreter's start."""
        imports = "import varmq.ops.cli, varmq.ops.fleet, varmq.ops.supervisor"
        bare, total, package = [], [], []
        for _ in range(5):
            started = time.perf_counter()
            subprocess.run([sys.executable, "-c", "pass"], env=self.env(), check=True)
            bare.append(time.perf_counter() - started)
            err = subprocess.run(
                [sys.executable, "-X", "importtime", "-c", imports],
                env=self.env(),
                check=True,
                capture_output=True,
                text=True,
            ).stderr
            # "import time: self [us] | cumulative | imported package", nesting by indent
            rows = [line.split("|") for line in err.splitlines() if line.count("|") == 2]
            top = [r for r in rows[1:] if not r[2].startswith("  ")]
            total.append(sum(int(r[1]) for r in top) / 1e3)
            package.append(next(int(r[1]) for r in rows[1:] if r[2].strip() == "varmq") / 1e3)
        return (
            f"the supervisor's imports before its first child (python -X importtime, best of "
            f"5): {min(total):.0f} ms, of which the varmq package (its __init__ imports the "
            f"whole library) {min(package):.0f} ms; a bare interpreter starts and exits in "
            f"{1e3 * min(bare):.0f} ms"
        )

    def _fill(self, spec: dict[str, Any], n: int) -> None:
        import varmq

        queues, stored = _storage(spec)
        threads = 8 if spec["adapter"] == "redisq" else 1  # the quickest fill of each
        try:
            add = varmq.new_distributed_queue(stored).add

            def some(count: int) -> None:
                for _ in range(count):
                    add(None)

            with ThreadPoolExecutor(threads) as pool:
                shares = [n // threads + (1 if i < n % threads else 0) for i in range(threads)]
                list(pool.map(some, shares))
            got = len(stored)
        finally:
            queues.close()
        if got != n:
            raise SystemExit(f"benchmark error: filled {got} jobs, expected {n}")

    def _cleanup(self, spec: dict[str, Any]) -> None:
        if spec["adapter"] == "redisq":
            import redis

            with redis.Redis.from_url(self.url) as client:
                client.flushdb()
        else:
            for suffix in ("", "-wal", "-shm"):
                Path(spec["path"] + suffix).unlink(missing_ok=True)


def _storage(spec: dict[str, Any]) -> tuple[Any, Any]:
    if spec["adapter"] == "redisq":
        import redisq

        queues = redisq.new(spec["url"])
    else:
        import sqliteq

        queues = sqliteq.new(spec["path"])
    return queues, queues.new_distributed_queue(spec["queue"])


# == what a run says ============================================================================


def drain(run: Run) -> Drain:
    """The drain rate over the window in which every process had finished a job, and what the
    machine did in that window."""
    firsts: dict[int, int] = {}
    for job in run.jobs:
        firsts[job.pid] = min(firsts.get(job.pid, job.ended), job.ended)
    ready = max(firsts.values())
    last = max(job.ended for job in run.jobs)
    window = [job for job in run.jobs if job.ended > ready]
    rate = len(window) / ((last - ready) / 1e9)
    counts = Counter(job.pid for job in window)
    shares = sorted((c / len(window) for c in counts.values()), reverse=True)
    return Drain(
        rate=rate,
        in_window=len(window) / len(run.jobs),
        shares=shares,
        cpu_ms=statistics.median(job.cpu for job in window) / 1e6,
        cores=_cores(run.samples, ready, last),
    )


def _cores(samples: list[Sample], start: int, end: int) -> dict[str, float]:
    """Cores used between ``start`` and ``end`` (ns), from the nearest samples."""

    def nearest(t: int) -> Sample:
        return min(samples, key=lambda s: abs(s[0] - t))

    a, b = nearest(start), nearest(end)
    wall = (b[0] - a[0]) / 1e9
    if wall <= 0:
        return {}
    cores = {
        "machine": (b[1] - a[1]) / wall,
        "command": (b[3] - a[3]) / wall,
        "redis": (b[4] - a[4]) / wall,
        "parent": (b[5] - a[5]) / wall,
    }
    cores["other"] = max(
        0.0, cores["machine"] - cores["command"] - cores["redis"] - cores["parent"]
    )
    return cores


# The command's log lines at --log-level info that mark its start-up: the supervisor starting
# a child, and a process having imported the module and built its workers (the line
# `varmq worker` logs just before it starts them).
_STEP = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO varmq\.\w+: varmq: "
    r"(child \d+ started|starting \d+ workers?,)",
    re.MULTILINE,
)


def startup(run: Run) -> dict[str, float]:
    """ms after Popen: ``first`` job's start, ``every`` process's first start, the first child
    ``spawned`` by a supervisor (0 without one), the first process ``loaded`` (module
    imported, workers built)."""
    firsts: dict[int, int] = {}
    for job in run.jobs:
        firsts[job.pid] = min(firsts.get(job.pid, job.started), job.started)
    got = {
        "first": (min(firsts.values()) - run.t0) / 1e6,
        "every": (max(firsts.values()) - run.t0) / 1e6,
        "spawned": 0.0,
        "loaded": float("nan"),
    }
    for stamp, what in reversed(_STEP.findall(run.log)):  # the earliest of each wins
        at = datetime.strptime(stamp, "%Y-%m-%d %H:%M:%S,%f").timestamp() * 1e3 - run.t0 / 1e6
        got["spawned" if what.startswith("child") else "loaded"] = at
    return got


# == main =======================================================================================


def drain_group(
    bench: Bench, adapter: str, kind: str, n: int, repeat: int, concurrency: int
) -> tuple[list[Figure], list[str]]:
    sides = [
        Side(f"1 process, c={concurrency}", 1, concurrency),
        Side(f"{PROCESSES} processes, c={concurrency} each", PROCESSES, concurrency),
        Side(f"1 process, c={PROCESSES * concurrency}", 1, PROCESSES * concurrency),
        Side(f"1 process, async def, c={concurrency}", 1, concurrency, is_async=True),
    ]
    details: dict[Side, list[Drain]] = {side: [] for side in sides}
    loads: list[float] = []
    statuses: dict[Side, list[int]] = {side: [] for side in sides}
    for i in range(repeat):
        order = sides if i % 2 == 0 else list(reversed(sides))
        for side in order:
            run = bench.run(adapter, kind, side, n)
            details[side].append(drain(run))
            statuses[side].append(run.status)
        loads.append(load1())
    base = sides[0]
    figures = []
    for side in sides[1:]:
        fig = Figure(f"{kind} {adapter}: {side.label}", baseline_name=base.label)
        fig.values = [d.rate for d in details[side]]
        fig.baselines = [d.rate for d in details[base]]
        fig.loads = loads
        fig.target = f">= {TARGETS[kind]}x" if side.processes > 1 else "(scale)"
        figures.append(fig)
    notes = [f"{kind} {adapter}, {n:,} jobs, medians of the runs over the timed window:"]
    notes.append(
        "| Side | jobs/s | jobs in window | shares of the processes | job CPU (ms) | job work "
        "(cores) | cores: machine | command | redis-server | this process | rest of the machine |"
    )
    notes.append("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|")
    for side in sides:
        drains = details[side]
        shares = [
            statistics.median(d.shares[k] for d in drains if len(d.shares) > k)
            for k in range(max(len(d.shares) for d in drains))
        ]
        cores = [
            spread([d.cores.get(key, 0.0) for d in drains], ".2f")
            for key in ("machine", "command", "redis", "parent", "other")
        ]
        notes.append(
            f"| {side.label} | {spread([d.rate for d in drains])} | "
            f"{statistics.median(d.in_window for d in drains):.0%} | "
            f"{' / '.join(f'{s:.0%}' for s in shares)} | "
            f"{spread([d.cpu_ms for d in drains], '.3f')} | "
            f"{spread([d.rate * d.cpu_ms / 1e3 for d in drains], '.2f')} | "
            + " | ".join(cores)
            + " |"
        )
    notes.append(_exits(statuses))
    if adapter == "sqliteq":
        notes += lock_times(bench, kind, n, sides[:3])
    return figures, notes


def lock_times(bench: Bench, kind: str, n: int, sides: list[Side]) -> list[str]:
    """One more run of each side with every write transaction timed in the processes (not
    in the figures): what the transactions waited for SQLite's write lock and held it."""
    lines = [
        f"{kind} sqliteq, write transactions timed (one run each, not in the figures; held = "
        "from BEGIN IMMEDIATE done to COMMIT done, summed over the processes, over the time "
        "from the first job's start to the last one's end):",
        "| Side | jobs/s | transactions per 100 jobs | held per transaction (µs) | of which "
        "CPU (µs) | write lock held | waited for it, in all (ms) | waits of 0.5 ms or more, "
        "by length rounded to the ms: count |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for side in sides:
        run = bench.run("sqliteq", kind, side, n, lock_times=True)
        if len(run.locks) != side.processes:
            lines.append(f"| {side.label} | {len(run.locks)} lock reports, expected one each |")
            continue
        total = {
            key: sum((lock[key] for lock in run.locks[1:]), run.locks[0][key])
            for key in run.locks[0]
        }
        long_waits = Counter(round(us / 1000) for us in total["long_waits_us"])
        waits = ", ".join(f"{ms}: {count}" for ms, count in sorted(long_waits.items())) or "none"
        wall = max(j.ended for j in run.jobs) - min(j.started for j in run.jobs)
        lines.append(
            f"| {side.label} | {drain(run).rate:,.0f} | "
            f"{100 * total['transactions'] / n:.1f} | "
            f"{total['held_ns'] / 1e3 / max(1, total['transactions']):.0f} | "
            f"{total['held_cpu_ns'] / 1e3 / max(1, total['transactions']):.0f} | "
            f"{total['held_ns'] / wall:.0%} | {total['waited_ns'] / 1e6:.0f} | "
            f"{waits} |"
        )
    return lines


def _exits(statuses: dict[Side, list[int]]) -> str:
    """The exit statuses after SIGTERM, by side: ``all 0`` where every run exited 0."""
    parts = []
    for side, got in statuses.items():
        parts.append(f"{side.label}: " + ("all 0" if not any(got) else ", ".join(map(str, got))))
    return "exit statuses after SIGTERM: " + "; ".join(parts)


def startup_group(bench: Bench, adapter: str, repeat: int) -> tuple[list[Figure], list[str]]:
    one = Side(f"1 process, c={CPU_CONCURRENCY}", 1, CPU_CONCURRENCY)
    many = Side(f"{PROCESSES} processes, c={CPU_CONCURRENCY} each", PROCESSES, CPU_CONCURRENCY)
    got: dict[Side, list[dict[str, float]]] = {one: [], many: []}
    statuses: dict[Side, list[int]] = {one: [], many: []}
    loads = []

    def start(side: Side) -> Run:
        return bench.run(
            adapter, "sleep", side, STARTUP_JOBS, "each", STARTUP_SLEEP, log_level="info"
        )

    for side in (one, many):
        start(side)  # not counted: the first start-ups compile what the bytecode cache lacks
    for i in range(repeat):
        for side in (one, many) if i % 2 == 0 else (many, one):
            run = start(side)
            got[side].append(startup(run))
            statuses[side].append(run.status)
        loads.append(load1())
    fig = Figure(f"startup {adapter}: {many.label}", unit="ms", baseline_name=one.label)
    fig.values = [times["first"] for times in got[many]]
    fig.baselines = [times["first"] for times in got[one]]
    fig.loads = loads
    fig.target = f"<= {TARGETS['startup']}x"
    fig.note = f"every process running: {spread([times['every'] for times in got[many]])} ms"
    notes = [
        f"startup {adapter}, ms after Popen (from the command's log lines, ms resolution):",
        "| Side | supervisor started a child | a process built its worker | first job started "
        "| every process running |",
        "|---|---:|---:|---:|---:|",
    ]
    for side in (one, many):
        cells = [
            spread([times[key] for times in got[side]], ".0f")
            for key in ("spawned", "loaded", "first", "every")
        ]
        if side.processes == 1:
            cells[0] = "-"
        notes.append(f"| {side.label} | " + " | ".join(cells) + " |")
    notes.append(f"startup {adapter}: {_exits(statuses)}")
    return [fig], notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer jobs, 2 runs: about a minute")
    parser.add_argument("--repeat", type=int, help="runs per figure (default 5; --quick 2)")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        help="only these (cpu, noop, startup, sqliteq, redisq); several must all match",
    )
    parser.add_argument("--cpu-jobs", type=int, help="CPU-bound jobs per run (400; --quick 200)")
    parser.add_argument("--noop-jobs", type=int, help="no-op jobs per run (20,000; --quick 5,000)")
    parser.add_argument(
        "--no-pycache",
        action="store_true",
        help="leave PYTHONDONTWRITEBYTECODE as it is (default: the command's processes keep "
        "compiled modules under the scratch directory, as an installed package does)",
    )
    args = parser.parse_args(argv)
    if not Path("/proc/stat").exists():
        raise SystemExit("benchmarks/processes.py reads /proc: Linux only")
    faulthandler.dump_traceback_later(1800, exit=True)
    q = args.quick
    repeat = args.repeat or (2 if q else 5)
    n_cpu = args.cpu_jobs or (200 if q else 400)
    n_noop = args.noop_jobs or (5_000 if q else 20_000)

    def wanted(*words: str) -> bool:
        return not args.only or all(any(w in word for word in words) for w in args.only)

    import redis

    from tests.support.redis_server import RedisServer

    loops = calibrate(JOB_MS)
    server = RedisServer()
    server.start()
    directory = Path(tempfile.mkdtemp(prefix="varmq-processes-"))
    with redis.Redis.from_url(server.url) as client:
        info = client.info("server")
    print(
        f"processes benchmark: {_common.machine()}; Redis {info['redis_version']} on "
        f"{server.url}; SQLite {sqlite3.sqlite_version} in {directory}; {repeat} runs per "
        f"figure; {'quick' if q else 'full'}; CPU job {loops:,} loops (~{JOB_MS:g} ms here)"
    )
    print(f"uptime at start: {_common.uptime()}")
    figures: list[Figure] = []
    notes: list[str] = []
    bench = Bench(server.url, int(info["process_id"]), directory, loops, not args.no_pycache)
    try:
        for adapter in ("sqliteq", "redisq"):
            for kind, n, concurrency in (
                ("cpu", n_cpu, CPU_CONCURRENCY),
                ("noop", n_noop, NOOP_CONCURRENCY),
            ):
                if wanted(kind, adapter):
                    started = time.monotonic()
                    got, lines = drain_group(bench, adapter, kind, n, repeat, concurrency)
                    figures += got
                    notes += [*lines, f"({kind} {adapter}: {time.monotonic() - started:.0f} s)"]
            if wanted("startup", adapter):
                started = time.monotonic()
                got, lines = startup_group(bench, adapter, repeat)
                figures += got
                notes += [*lines, f"(startup {adapter}: {time.monotonic() - started:.0f} s)"]
        if wanted("startup", "sqliteq", "redisq"):
            notes.append(bench.supervisor_imports())
    finally:
        server.close()
        shutil.rmtree(directory, ignore_errors=True)
    print(f"uptime at end:   {_common.uptime()}")
    print()
    print_table(figures)
    print()
    for line in notes:
        print(line)
    if bench.failed_exit:
        print(f"NOT CLEAN: {bench.failed_exit}")
    return 0


def print_table(figures: list[Figure]) -> None:
    print(
        "| Measure | Value: median (min-max) | Baseline | Baseline: median (min-max) | "
        "Ratio: median (min-max) | Target | Met | Load 1-min |"
    )
    print("|---|---:|---|---:|---:|---|---|---|")
    for fig in figures:
        ratios = fig.ratios()
        fmt = ".0f" if fig.unit == "ms" else ",.0f"
        value = spread(fig.values, fmt) + f" {fig.unit}"
        if fig.note:
            value += f"; {fig.note}"
        print(
            f"| {fig.name} | {value} | {fig.baseline_name} | "
            f"{spread(fig.baselines, fmt)} {fig.unit} | {spread(ratios, '.2f')} | "
            f"{fig.target} | {_judge(fig)} | {spread(fig.loads, '.2f')} |"
        )


def _judge(fig: Figure) -> str:
    ratio = fig.ratio()
    kind = fig.name.split()[0]
    if ratio is None or fig.target == "(scale)":
        return "-"
    ok = ratio <= TARGETS[kind] if kind == "startup" else ratio >= TARGETS[kind]
    return "yes" if ok else "NO"


if __name__ == "__main__":
    sys.exit(main())
