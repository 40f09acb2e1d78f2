"""Tasks against the plain queue API they are built on: enqueue, ``enqueue_async`` and drain.

``@app.task`` stores a call as an ordinary job, ``{"task": name, "args": [...], "kwargs": {}}``
with a fresh uuid4 id, on a distributed priority queue that keeps records; ``app.worker()`` is
a result worker that rebuilds the arguments from the function's annotations. Each measure here
runs the task path and, alternating with it in the same process and run, the same work written
by hand on the same kind of queue (docs/benchmarks.md#tasks gives the table):

1. enqueue, 1 and 8 threads: ``task.enqueue(a, b)`` against ``handle.add(data, 0,
   job_id=uuid4().hex, strict=True)`` of the same data on a producer handle,
   ``varmq.new_distributed_priority_queue(store.new_distributed_priority_queue(name,
   keep_results=86400))``; sqliteq and redisq. In memory too (no target): ``App(None)`` against
   ``bind_priority_queue(keep_results=86400).add`` on a worker that is not running.
2. enqueue_async: ``await task.enqueue_async(a, b)`` against a coroutine awaiting
   ``handle.add_async(data, 0, job_id=uuid4().hex, strict=True)``, ``--in-flight`` (64) at a
   time (``asyncio.gather`` in chunks) on one event loop; both make the data and the id when
   the coroutine runs.
3. drain: N queued calls of ``noop(user: int, email: str, when: datetime)`` run by
   ``app.worker(concurrency=8)`` against ``varmq.new_result_worker(fn, 8)`` whose ``fn`` unpacks
   ``job.data["args"]``, parses the datetime and calls the same function; both with
   ``retry=Retry(max_attempts=1)`` (the app's default), from ``worker.start()`` to
   ``worker.wait()``. sqliteq, redisq, and in memory (``App(None)`` against
   ``bind_priority_queue(keep_results=86400)``), in memory at concurrency 1 as well.

Every run gets a fresh store (a new SQLite file; new queue names on one redis-server started
here on a free loopback port), a warm-up and a ``gc.collect()`` before the clock starts; the
runs are paired, task and hand-written alternating which goes first. The table gives jobs per
second (median, min-max), the ratio task / hand-written run by run (target: a median of at
least 0.85), and the process's CPU time per job (all its threads, not redis-server's), which a
busy machine moves less than the wall clock. ``--profile`` runs the task side of each measure
once more under cProfile (worker threads included); ``--breakdown`` only times the task layer's
parts per call, with no storage below::

    .venv/bin/python benchmarks/tasks.py                    # 5,000 jobs (50,000 in memory), 5 pairs
    .venv/bin/python benchmarks/tasks.py --quick            # 500 jobs, 2 pairs: a few seconds
    .venv/bin/python benchmarks/tasks.py --only "memory drain" --profile
    .venv/bin/python benchmarks/tasks.py --breakdown
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import faulthandler
import gc
import io
import pstats
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, NamedTuple

from _common import Figure, load1, machine, setup_path, spread, uptime

setup_path()

import redisq  # noqa: E402
import sqliteq  # noqa: E402
import varmq  # noqa: E402
from tests.support.redis_server import RedisServer  # noqa: E402
from varmq.tasks.runner import TaskRunner  # noqa: E402

TARGET = 0.85
KEEP = 86_400.0
CONCURRENCY = 8
THREADS = 8
STUCK_SECONDS = 300.0
WHEN = datetime(2026, 12, 1, 9, 30, tzinfo=timezone.utc)
RUN_ONCE = varmq.Retry(max_attempts=1)

Store = Any  # what sqliteq.new / redisq.new return
OpenStore = Callable[[int], Any]  # run number -> a context manager giving a fresh store


def add(a: int, b: int) -> int:
    """The enqueued task (never run here)."""
    return a + b


def noop(user: int, email: str, when: datetime) -> None:
    """The drained task: typed arguments, nothing done."""


def by_hand(job: varmq.Job[Any]) -> None:
    """The baseline worker's function: what a user writes without tasks."""
    args = job.data["args"]
    noop(args[0], args[1], datetime.fromisoformat(args[2]))


def _add_data(i: int) -> dict[str, Any]:
    return {"task": "bench.add", "args": [i, i + 1], "kwargs": {}}


def _noop_data(i: int) -> dict[str, Any]:
    return {"task": "bench.noop", "args": [i, _email(i), WHEN.isoformat()], "kwargs": {}}


def _email(i: int) -> str:
    return f"user{i}@example.com"


def _new_id() -> str:
    return uuid.uuid4().hex


# -- enqueue ------------------------------------------------------------------------------------


class Timing(NamedTuple):
    """One run: jobs per second (wall clock) and the process's CPU time per job, every thread
    of it (not redis-server's), which a busy machine moves less than the wall clock."""

    rate: float
    cpu_us: float


class Clock:
    """Started when made; :meth:`done` gives the :class:`Timing` of ``n`` jobs since."""

    def __init__(self) -> None:
        self.wall = time.perf_counter()
        self.cpu = time.process_time()

    def done(self, n: int) -> Timing:
        wall, cpu = time.perf_counter() - self.wall, time.process_time() - self.cpu
        return Timing(n / wall, cpu / n * 1e6)


def _threads(one: Callable[[int], object], n: int, threads: int) -> Timing:
    """``threads`` threads calling ``one(i)`` for every i below n between them."""
    if threads == 1:
        clock = Clock()
        for i in range(n):
            one(i)
        return clock.done(n)
    barrier = threading.Barrier(threads + 1)
    errors: list[BaseException] = []

    def loop(first: int) -> None:
        barrier.wait()
        try:
            for i in range(first, n, threads):
                one(i)
        except BaseException as exc:
            errors.append(exc)

    pool = [threading.Thread(target=loop, args=(k,)) for k in range(threads)]
    for thread in pool:
        thread.start()
    clock = Clock()
    barrier.wait()
    for thread in pool:
        thread.join()
    timing = clock.done(n)
    if errors:
        raise errors[0]
    return timing


def _enqueue_one(store: Store, side: str, run: int) -> Callable[[int], object]:
    if side == "task":
        app = varmq.App(store, default_queue=f"tasks-{run}")
        task = app.task(name="bench.add")(add)
        return lambda i: task.enqueue(i, i + 1)
    handle = varmq.new_distributed_priority_queue(
        store.new_distributed_priority_queue(f"plain-{run}", keep_results=KEEP)
    )
    return lambda i: handle.add(_add_data(i), 0, job_id=_new_id(), strict=True)


def enqueue(open_store: OpenStore, side: str, n: int, run: int, threads: int) -> Timing:
    """``n`` adds by ``threads`` threads sharing one task (or handle) on a fresh store."""
    with open_store(run) as store:
        one = _enqueue_one(store, side, run)
        _threads(lambda i: one(-1 - i), 4 * threads, threads)  # connections and threads up
        gc.collect()
        return _threads(one, n, threads)


async def _enqueue_async(open_store: OpenStore, side: str, n: int, run: int, k: int) -> Timing:
    with open_store(run) as store:
        one: Callable[[int], Awaitable[object]]
        if side == "task":
            app = varmq.App(store, default_queue=f"tasks-{run}")
            task = app.task(name="bench.add")(add)
            one = lambda i: task.enqueue_async(i, i + 1)  # noqa: E731
        else:
            handle = varmq.new_distributed_priority_queue(
                store.new_distributed_priority_queue(f"plain-{run}", keep_results=KEEP)
            )

            async def by_hand_async(i: int) -> bool:
                # The data and id are made when the coroutine runs, as in enqueue_async (and in
                # a request handler): made eagerly by gather's argument list instead, they
                # would all come before the first add reaches the storage.
                return await handle.add_async(_add_data(i), 0, job_id=_new_id(), strict=True)

            one = by_hand_async
        await asyncio.gather(*(one(-1 - i) for i in range(k)))  # warm-up: one full chunk
        gc.collect()
        clock = Clock()
        for first in range(0, n, k):
            await asyncio.gather(*(one(i) for i in range(first, min(first + k, n))))
        return clock.done(n)


def enqueue_async(open_store: OpenStore, side: str, n: int, run: int, in_flight: int) -> Timing:
    """``n`` adds from one event loop keeping ``in_flight`` calls outstanding."""
    return asyncio.run(_enqueue_async(open_store, side, n, run, in_flight))


def enqueue_memory(n: int, run: int, side: str) -> Timing:
    """``n`` adds from one thread to an in-memory queue with records whose worker is not
    running: what the task layer costs with next to no storage below it."""
    one: Callable[[int], object]
    if side == "task":
        app = varmq.App(None, default_queue=f"memory-tasks-{run}")
        task = app.task(name="bench.add")(add)
        app.worker(concurrency=1, auto_run=False)  # binds the app's queue; never started
        one = lambda i: task.enqueue(i, i + 1)  # noqa: E731
    else:
        worker = varmq.new_result_worker(by_hand, 1, auto_run=False, retry=RUN_ONCE)
        queue = worker.bind_priority_queue(name=f"memory-plain-{run}", keep_results=KEEP)
        one = lambda i: queue.add(_add_data(i), 0, job_id=_new_id(), strict=True)  # noqa: E731
    one(-1)
    gc.collect()
    return _threads(one, n, 1)


# -- drain --------------------------------------------------------------------------------------


def _timed_drain(worker: varmq.ResultWorker[Any, Any], n: int) -> Timing:
    gc.collect()  # the previous runs' jobs, not this run's clock
    clock = Clock()
    worker.start()
    done = worker.wait(STUCK_SECONDS)
    timing = clock.done(n)
    worker.stop_and_wait()
    if not done or worker.metrics.successful != n:
        raise RuntimeError(f"drain: {worker.metrics.successful} of {n} jobs ran")
    return timing


def drain(open_store: OpenStore, side: str, n: int, run: int) -> Timing:
    """A worker of concurrency 8 running ``n`` queued calls, from its start to its ``wait``."""
    with open_store(run) as store:
        worker: varmq.ResultWorker[Any, Any]
        if side == "task":
            app = varmq.App(store, default_queue=f"drain-tasks-{run}")
            task = app.task(name="bench.noop")(noop)
            for i in range(n):
                task.enqueue(i, _email(i), WHEN)
            worker = app.worker(concurrency=CONCURRENCY, auto_run=False)
        else:
            name = f"drain-plain-{run}"
            producer = varmq.new_distributed_priority_queue(
                store.new_distributed_priority_queue(name, keep_results=KEEP)
            )
            for i in range(n):
                producer.add(_noop_data(i), 0, job_id=_new_id(), strict=True)
            worker = varmq.new_result_worker(by_hand, CONCURRENCY, auto_run=False, retry=RUN_ONCE)
            worker.with_distributed_priority_queue(
                store.new_distributed_priority_queue(name, keep_results=KEEP)
            )
        return _timed_drain(worker, n)


def drain_memory(n: int, run: int, side: str, concurrency: int) -> Timing:
    """:func:`drain` on in-memory queues: ``App(None)`` against ``bind_priority_queue``."""
    worker: varmq.ResultWorker[Any, Any]
    if side == "task":
        app = varmq.App(None, default_queue=f"memory-tasks-{run}")
        task = app.task(name="bench.noop")(noop)
        worker = app.worker(concurrency=concurrency, auto_run=False)
        for i in range(n):
            task.enqueue(i, _email(i), WHEN)
    else:
        worker = varmq.new_result_worker(by_hand, concurrency, auto_run=False, retry=RUN_ONCE)
        queue = worker.bind_priority_queue(name=f"memory-plain-{run}", keep_results=KEEP)
        for i in range(n):
            queue.add(_noop_data(i), 0, job_id=_new_id(), strict=True)
    return _timed_drain(worker, n)


# -- running the measures ----------------------------------------------------------------------

Measure = Callable[[str, int], Timing]  # (side, run number) -> its timing
MakeMeasure = Callable[[OpenStore], Measure]


class Runs:
    """Numbers the runs, so that every run has queues and files of its own."""

    def __init__(self) -> None:
        self.count = 0

    def next(self) -> int:
        self.count += 1
        return self.count


@dataclass
class TaskFigure(Figure):
    """A :class:`Figure` (jobs per second) with the CPU time per job of each run too."""

    cpu: list[float] = field(default_factory=list)
    cpu_baselines: list[float] = field(default_factory=list)

    def cpu_ratios(self) -> list[float]:
        """Hand-written CPU per job over the task's, run by run: like the rate ratio, above 1
        means the task path is cheaper."""
        return [b / v for v, b in zip(self.cpu, self.cpu_baselines, strict=True) if v]


def _pair(figure: TaskFigure, measure: Measure, repeat: int, runs: Runs) -> None:
    """``repeat`` paired runs, task and baseline alternating which goes first."""
    for r in range(repeat):
        order = ("task", "plain") if r % 2 == 0 else ("plain", "task")
        got: dict[str, Timing] = {}
        for side in order:
            faulthandler.dump_traceback_later(STUCK_SECONDS + 60, exit=True)
            got[side] = measure(side, runs.next())
            faulthandler.cancel_dump_traceback_later()
        figure.values.append(got["task"].rate)
        figure.baselines.append(got["plain"].rate)
        figure.cpu.append(got["task"].cpu_us)
        figure.cpu_baselines.append(got["plain"].cpu_us)
        figure.loads.append(load1())
    ratio = figure.ratio()
    print(
        f"  {figure.name}: ratio {spread(figure.ratios(), '.2f')}, "
        f"CPU ratio {spread(figure.cpu_ratios(), '.2f')}",
        file=sys.stderr,
    )
    if figure.target == "none":
        figure.note = "-"
    else:
        figure.note = "yes" if ratio is not None and ratio >= TARGET else "NO"


def _profile(name: str, measure: Measure, runs: Runs, top: int) -> None:
    """The task side of ``measure`` once more, under cProfile in every thread: the whole run,
    a drain's filling of its queue included (cProfile inflates small calls: ``--breakdown``
    gives their cost)."""
    profilers = [cProfile.Profile()]

    def start_thread(*_: object) -> None:  # a profiler of its own for each thread started
        mine = cProfile.Profile()
        profilers.append(mine)
        mine.enable()

    threading.setprofile(start_thread)
    profilers[0].enable()
    try:
        measure("task", runs.next())
    finally:
        profilers[0].disable()
        threading.setprofile(None)
    out = io.StringIO()
    stats = pstats.Stats(*profilers, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    print(f"\n### cProfile, task side: {name}\n\n```\n{out.getvalue().strip()}\n```")


def _per_call(fn: Callable[[], object], number: int) -> float:
    """Microseconds per call of ``fn``: the fastest of 5 rounds of ``number`` calls."""
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / number * 1e6


def breakdown(number: int) -> None:
    """Microseconds per call of the task layer's parts, against the hand-written lines, with
    no storage below: the enqueue's own parts, and the worker's function on a job made here.
    (Whole enqueues are the ``memory enqueue`` figure: a queue growing by 100,000 jobs a round
    would time the garbage collector more than the calls.)"""
    app = varmq.App(None, default_queue="breakdown")
    task = app.task(name="bench.add")(add)
    noop_task = app.task(name="bench.noop")(noop)
    runner = TaskRunner(app.tasks, app.counts)
    job = varmq.Job(_new_id(), _noop_data(1))
    stored = job.data["args"]
    rows = [
        ("enqueue", "uuid.uuid4().hex (both sides)", _new_id),
        (
            "enqueue",
            "task.signature.encode_call((1, 2), {})",
            lambda: task.signature.encode_call((1, 2), {}),
        ),
        ("enqueue", "the data dict by hand", lambda: _add_data(1)),
        ("worker", "TaskRunner.run(job) (what app.worker runs)", lambda: runner.run(job)),
        ("worker", "by_hand(job)", lambda: by_hand(job)),
        (
            "worker",
            "  noop_task.signature.decode_call(args, {})",
            lambda: noop_task.signature.decode_call(stored, {}),
        ),
        ("worker", "  app.counts.add(name, True, seconds)", lambda: app.counts.add("x", True, 0.0)),
        ("worker", "  2 x time.perf_counter()", lambda: (time.perf_counter(), time.perf_counter())),
        ("worker", "  datetime.fromisoformat(text)", lambda: datetime.fromisoformat(stored[2])),
    ]
    print(f"\nwhere a call's time goes, µs per call, best of 5 x {number:,} ({machine()})\n")
    print("| side | call | µs |")
    print("|---|---|---:|")
    for side, name, fn in rows:
        print(f"| {side} | `{name}` | {_per_call(fn, number):.2f} |")
    print()


@contextmanager
def _sqlite_stores(tmp: str) -> Iterator[OpenStore]:
    @contextmanager
    def open_store(run: int) -> Iterator[Store]:
        with sqliteq.new(Path(tmp) / f"run-{run}.db") as store:
            yield store

    yield open_store


@contextmanager
def _redis_stores() -> Iterator[OpenStore]:
    server = RedisServer()
    server.start()

    @contextmanager
    def open_store(run: int) -> Iterator[Store]:
        with redisq.new(server.url) as store:
            yield store

    try:
        yield open_store
    finally:
        server.close()


def _figures(store: str, n: int, in_flight: int) -> list[tuple[TaskFigure, MakeMeasure]]:
    """The measures on one kind of store, each made from the function opening its stores."""

    def threads(k: int) -> MakeMeasure:
        return lambda stores: lambda side, run: enqueue(stores, side, n, run, k)

    return [
        (TaskFigure(f"{store} enqueue, 1 thread", baseline_name="handle.add"), threads(1)),
        (
            TaskFigure(f"{store} enqueue, {THREADS} threads", baseline_name="handle.add"),
            threads(THREADS),
        ),
        (
            TaskFigure(
                f"{store} enqueue_async, {in_flight} in flight", baseline_name="handle.add_async"
            ),
            lambda stores: lambda side, run: enqueue_async(stores, side, n, run, in_flight),
        ),
        (
            TaskFigure(f"{store} drain, c={CONCURRENCY}", baseline_name="new_result_worker"),
            lambda stores: lambda side, run: drain(stores, side, n, run),
        ),
    ]


def _memory_measure(n: int, concurrency: int) -> Measure:
    return lambda side, run: drain_memory(n, run, side, concurrency)


def _wanted(name: str, only: list[str]) -> bool:
    return not only or any(text in name for text in only)


def _table(figures: list[TaskFigure]) -> None:
    print(
        "| Measure | task (jobs/s) | hand-written | hand-written (jobs/s) | ratio | met "
        "| CPU µs/job, task | CPU µs/job, hand-written | CPU ratio |"
    )
    print("|---|---:|---|---:|---:|---|---:|---:|---:|")
    for f in figures:
        print(
            f"| {f.name} | {spread(f.values)} | `{f.baseline_name}` | {spread(f.baselines)} | "
            f"{spread(f.ratios(), '.2f')} | {f.note} | {spread(f.cpu, '.1f')} | "
            f"{spread(f.cpu_baselines, '.1f')} | {spread(f.cpu_ratios(), '.2f')} |"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=5000, help="jobs per run on a store (5000)")
    parser.add_argument(
        "--memory-n", type=int, default=None, help="jobs per in-memory drain (default 10 x n)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="paired runs per figure (5)")
    parser.add_argument("--in-flight", type=int, default=64, help="enqueue_async calls out (64)")
    parser.add_argument("--quick", action="store_true", help="500 jobs, 2 paired runs")
    parser.add_argument(
        "--only", action="append", default=[], metavar="TEXT", help="measures naming TEXT"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the task side too")
    parser.add_argument("--top", type=int, default=25, help="functions listed by --profile")
    parser.add_argument(
        "--breakdown", action="store_true", help="only time the task layer's parts, per call"
    )
    args = parser.parse_args(argv)
    if args.breakdown:
        breakdown(20_000 if args.quick else 100_000)
        return 0
    if args.quick:
        args.n, args.repeat = 500, 2
    memory_n = args.memory_n or 10 * args.n
    runs = Runs()
    figures: list[TaskFigure] = []
    started = uptime()

    def run(figure: TaskFigure, measure: Measure) -> None:
        _pair(figure, measure, args.repeat, runs)
        figures.append(figure)
        if args.profile:
            _profile(figure.name, measure, runs, args.top)

    with tempfile.TemporaryDirectory() as tmp:
        for store, stores in (("sqliteq", _sqlite_stores(tmp)), ("redisq", _redis_stores())):
            wanted = [
                (figure, make)
                for figure, make in _figures(store, args.n, args.in_flight)
                if _wanted(figure.name, args.only)
            ]
            if not wanted:
                continue
            with stores as open_store:
                for figure, make in wanted:
                    run(figure, make(open_store))
        memory = TaskFigure("memory enqueue, 1 thread", baseline_name="queue.add", target="none")
        if _wanted(memory.name, args.only):
            run(memory, lambda side, r: enqueue_memory(memory_n, r, side))
        for c in (CONCURRENCY, 1):
            memory = TaskFigure(f"memory drain, c={c}", baseline_name="new_result_worker")
            if _wanted(memory.name, args.only):
                run(memory, _memory_measure(memory_n, c))

    print()
    print(
        f"tasks against hand-written adds and workers: {args.n:,} jobs a run on a store, "
        f"{memory_n:,} in memory; {args.repeat} paired runs, median (min-max); {machine()}"
    )
    print(f"before: {started}")
    print(f"after:  {uptime()}")
    loads = [load for f in figures for load in f.loads]
    if loads:
        print(f"1-minute load at the runs: {min(loads):.2f}-{max(loads):.2f}")
    print()
    _table(figures)
    print()
    print(
        "ratio: task jobs/s over hand-written jobs/s, run by run (median, min-max); "
        f"met: the median ratio is at least {TARGET}. CPU: this process's CPU time (all its "
        "threads) per job over the timed part; CPU ratio: hand-written over task, run by run."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
