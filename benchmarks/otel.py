"""OpenTelemetry tracing: what it costs when it is off, and when it is on.

``VarmqInstrumentor().instrument(tracer_provider=tp)`` installs an observer that every add and
every run reads (``varmq.contract.observe.OBSERVER``, ``None`` when nothing is installed). Two
questions, each answered with ratios measured in one process and one run:

1. **off**: does the ``None`` check cost anything? Four rows, each against a baseline in the same
   process, the two alternating which goes first (concurrency 4 throughout):

   - *memory add*: ``new_worker(noop, 4)`` + ``bind_queue()``, ``add(None)`` N times, then
     ``worker.wait()``; baseline ``ThreadPoolExecutor(4)``: ``submit(noop)`` N times, then
     ``shutdown(wait=True)``.
   - *memory drain*: N jobs added to a worker that is not running, timed from ``worker.start()``
     to ``worker.wait()``; baseline: a ``ThreadPoolExecutor(4)`` whose 4 threads wait on an event
     while N ``submit(noop)`` queue up, timed from setting the event to ``shutdown(wait=True)``.
   - *sqliteq add*: single ``add(None)`` on a persistent queue (``sqliteq.new(path)``, default
     durability); baseline one autocommit ``INSERT`` of a same-sized envelope per job (WAL,
     ``synchronous=NORMAL``).
   - *sqliteq drain*: N stored jobs drained by ``new_worker(noop, 4)``; baseline one thread
     looping claim (``UPDATE ... RETURNING`` in ``BEGIN IMMEDIATE``) + ``DELETE``, as
     ``benchmarks/sqliteq.py`` does.

   ``--compare OLD_ROOT`` runs that part as child processes, the tree at ``OLD_ROOT`` (e.g. a
   ``git worktree`` of the commit before tracing) and this one alternating, each with
   ``PYTHONPATH=<root>:<root>/adapters``, and prints both trees' jobs/s and ratios side by side.
   A tree without ``varmq.otel`` runs the off part only.

2. **on**: the same varmq rows with ``VarmqInstrumentor().instrument(tracer_provider=tp)`` in
   force (jobs added while instrumented too, so each run extracts its producer's context),
   against the same rows not instrumented; ``instrument()`` / ``uninstrument()`` between the
   runs, which alternate. ``tp`` is an SDK ``TracerProvider`` whose exporter discards what it
   gets (and counts it) behind a ``BatchSpanProcessor`` (defaults: a queue of 2,048 spans, so
   spans made faster than the export thread takes them are dropped, as in production), again
   behind a ``SimpleSpanProcessor`` (export in the thread that ended the span), and for the
   drains with an ``ALWAYS_OFF`` sampler (what is left when nothing is recorded). These rows
   run a fifth of ``-n`` in memory and half of ``--sqlite-n``. Target: an instrumented drain
   at least 0.7x the drain not instrumented.

``--profile`` runs an instrumented in-memory drain under cProfile (every thread) and gives the
tracing functions' time per job; ``--breakdown`` times the observer's calls and their parts per
call with no profiler. Every run is on fresh queues (a new SQLite file), after a warm-up and a
``gc.collect()``; the table gives jobs per second (median, min-max over the rounds), the
ratios run by run, and the process's CPU time per job (all its threads)::

    .venv/bin/python benchmarks/otel.py                      # 50,000 / 5,000 jobs, 5 rounds
    .venv/bin/python benchmarks/otel.py --quick              # a few seconds
    .venv/bin/python benchmarks/otel.py --part off --compare /tmp/bench-old --pairs 3
    .venv/bin/python benchmarks/otel.py --profile --breakdown
"""

from __future__ import annotations

import argparse
import cProfile
import faulthandler
import gc
import io
import json
import logging
import os
import pstats
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import asdict, dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, NamedTuple

from _common import ROOT, Figure, load1, machine, setup_path, spread, uptime

if os.environ.get("PYTHONPATH"):
    # The tree to measure is the one PYTHONPATH names (--compare sets it for each child): only
    # benchmarks/ leaves sys.path, where this directory's sqliteq.py would shadow the adapter.
    _HERE = ROOT / "benchmarks"
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
else:
    setup_path()

import sqliteq
import varmq

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
    from opentelemetry.trace import SpanKind

    from varmq.contract import observe
    from varmq.model.retry import Outcome
    from varmq.otel import VarmqInstrumentor

    TRACING = True
except ImportError:  # the tree before tracing, or no OpenTelemetry SDK: the off part only
    TRACING = False

CONCURRENCY = 4
TARGET_ON = 0.7  # instrumented drain / not instrumented
TARGET_OFF = 0.98  # not instrumented / the tree before tracing (--compare)
STUCK_SECONDS = 300.0
# What the raw baselines store: the envelope sqliteq stores for add(None) (same size).
PAYLOAD = b'{"id":"0123456789abcdef0123456789abcdef","status":"Created","data":null}'


def noop(job: Any) -> None:
    return None


def plain_noop() -> None:
    return None


class Timing(NamedTuple):
    """One run: jobs per second (wall clock) and the process's CPU time per job (all threads)."""

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


def _expect(got: int, want: int, what: str) -> None:
    if got != want:
        raise SystemExit(f"benchmark error: {what}: {got}, expected {want}")


def _nothing() -> None:
    return None


# -- one run each; ``ready`` is called once the jobs are in place, before the clock starts -------

Ready = Callable[[], None]


def memory_add(n: int, ready: Ready) -> Timing:
    worker = varmq.new_worker(noop, CONCURRENCY)
    add = worker.bind_queue().add
    ready()
    gc.collect()
    clock = Clock()
    for _ in range(n):
        add(None)
    worker.wait()
    timing = clock.done(n)
    completed = worker.metrics.completed
    worker.stop_and_wait()
    _expect(completed, n, "memory add: jobs completed")
    return timing


def executor_add(n: int, ready: Ready) -> Timing:
    executor = ThreadPoolExecutor(CONCURRENCY)
    submit = executor.submit
    gc.collect()
    clock = Clock()
    for _ in range(n):
        submit(plain_noop)
    executor.shutdown(wait=True)
    return clock.done(n)


def memory_drain(n: int, ready: Ready, concurrency: int = CONCURRENCY) -> Timing:
    worker = varmq.new_worker(noop, concurrency, auto_run=False)
    add = worker.bind_queue().add
    for _ in range(n):
        add(None)
    ready()
    gc.collect()
    clock = Clock()
    worker.start()
    worker.wait()
    timing = clock.done(n)
    completed = worker.metrics.completed
    worker.stop_and_wait()
    _expect(completed, n, "memory drain: jobs completed")
    return timing


def executor_drain(n: int, ready: Ready, concurrency: int = CONCURRENCY) -> Timing:
    executor = ThreadPoolExecutor(concurrency)
    gate = threading.Event()
    for _ in range(concurrency):  # one thread each, all waiting at the gate
        executor.submit(gate.wait)
    submit = executor.submit
    for _ in range(n):
        submit(plain_noop)
    gc.collect()
    clock = Clock()
    gate.set()
    executor.shutdown(wait=True)
    return clock.done(n)


@contextmanager
def fresh_path() -> Iterator[Path]:
    """A database file in a fresh temporary directory, removed after."""
    with tempfile.TemporaryDirectory(prefix="otel-bench-") as directory:
        yield Path(directory) / "jobs.db"


def sqliteq_add(n: int, ready: Ready) -> Timing:
    with fresh_path() as path:
        queues = sqliteq.new(path)
        try:
            worker = varmq.new_worker(noop, CONCURRENCY, auto_run=False)
            stored = queues.new_queue("bench")
            add = worker.with_persistent_queue(stored).add
            add(None)  # the connection and the schema up
            ready()
            gc.collect()
            clock = Clock()
            for _ in range(n):
                add(None)
            timing = clock.done(n)
            _expect(len(stored), n + 1, "sqliteq add")
            return timing
        finally:
            queues.close()  # the worker never started: nothing to stop


def _raw_connection(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute(
        "CREATE TABLE jobs (id INTEGER PRIMARY KEY, data BLOB NOT NULL, state TEXT NOT NULL)"
    )
    conn.execute("CREATE INDEX jobs_state ON jobs (state, id)")
    return conn


def raw_insert(n: int, ready: Ready) -> Timing:
    with fresh_path() as path:
        conn = _raw_connection(path)
        try:
            insert, execute = "INSERT INTO jobs (data, state) VALUES (?, 'ready')", conn.execute
            execute(insert, (PAYLOAD,))
            gc.collect()
            clock = Clock()
            for _ in range(n):
                execute(insert, (PAYLOAD,))  # autocommit: one transaction per job
            timing = clock.done(n)
            _expect(conn.execute("SELECT count(*) FROM jobs").fetchone()[0], n + 1, "INSERT")
            return timing
        finally:
            conn.close()


def sqliteq_drain(n: int, ready: Ready) -> Timing:
    with fresh_path() as path:
        queues = sqliteq.new(path)
        worker = varmq.new_worker(noop, CONCURRENCY, auto_run=False)
        try:
            stored = queues.new_queue("bench")
            add = worker.with_persistent_queue(stored).add
            for _ in range(n):
                add(None)
            _expect(len(stored), n, "sqliteq drain: fill")
            ready()
            gc.collect()
            clock = Clock()
            worker.start()
            worker.wait()
            timing = clock.done(n)
            _expect(worker.metrics.completed, n, "sqliteq drain: jobs completed")
            _expect(len(stored), 0, "sqliteq drain: jobs left")
            return timing
        finally:
            worker.stop_and_wait()
            queues.close()


def raw_claim_delete(n: int, ready: Ready) -> Timing:
    with fresh_path() as path:
        conn = _raw_connection(path)
        try:
            conn.execute("BEGIN")
            conn.executemany("INSERT INTO jobs (data, state) VALUES (?, 'ready')", [(PAYLOAD,)] * n)
            conn.execute("COMMIT")
            execute = conn.execute
            claim = (
                "UPDATE jobs SET state = 'leased' WHERE id = "
                "(SELECT id FROM jobs WHERE state = 'ready' ORDER BY id LIMIT 1) "
                "RETURNING id, data"
            )
            delete = "DELETE FROM jobs WHERE id = ?"
            done = 0
            gc.collect()
            clock = Clock()
            while True:
                execute("BEGIN IMMEDIATE")
                row = execute(claim).fetchone()
                execute("COMMIT")
                if row is None:
                    break
                noop(row[1])
                execute(delete, (row[0],))  # autocommit: its own transaction
                done += 1
            timing = clock.done(n)
            _expect(done, n, "raw claim+DELETE")
            return timing
        finally:
            conn.close()


Run = Callable[[int, Ready], Timing]


@dataclass
class Measure:
    name: str
    varmq: Run
    baseline: Run
    baseline_name: str
    storage: bool  # n is --sqlite-n, not -n
    spans_per_job: int  # spans an instrumented run makes per job, in the timed part


MEASURES = [
    Measure(
        f"memory add, c={CONCURRENCY}",
        memory_add,
        executor_add,
        "ThreadPoolExecutor submit",
        False,
        2,
    ),
    Measure(
        f"memory drain, c={CONCURRENCY}",
        memory_drain,
        executor_drain,
        "ThreadPoolExecutor, queued",
        False,
        1,
    ),
    Measure(
        "memory drain, c=1",
        partial(memory_drain, concurrency=1),
        partial(executor_drain, concurrency=1),
        "ThreadPoolExecutor, queued",
        False,
        1,
    ),
    Measure("sqliteq add", sqliteq_add, raw_insert, "autocommit INSERT", True, 1),
    Measure(
        f"sqliteq drain, c={CONCURRENCY}",
        sqliteq_drain,
        raw_claim_delete,
        "claim + DELETE, 1 thread",
        True,
        1,
    ),
]


# -- tracing -------------------------------------------------------------------------------------

if TRACING:

    class NullExporter(SpanExporter):
        """Discards every span; counts them (the count is all the work it does)."""

        def __init__(self) -> None:
            self.spans = 0

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            self.spans += len(spans)
            return SpanExportResult.SUCCESS

        def shutdown(self) -> None:
            return None


class Tracing:
    """An SDK tracer provider with a :class:`NullExporter` behind one kind of span processor,
    made once (as an application does at start-up) and instrumented for one run at a time."""

    def __init__(self, processor: str) -> None:
        self.processor = processor
        self.exporter = NullExporter()
        # "unsampled": every span dropped by the sampler (ALWAYS_OFF), what varmq's own part
        # costs when a sampler keeps almost nothing.
        self.provider = TracerProvider(sampler=ALWAYS_OFF if processor == "unsampled" else None)
        if processor in ("batch", "unsampled"):
            self.provider.add_span_processor(BatchSpanProcessor(self.exporter))
        else:
            self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.before = 0

    def ready(self) -> None:
        """The fill's spans exported (or dropped) before the clock starts."""
        self.provider.force_flush()
        self.before = self.exporter.spans

    @contextmanager
    def on(self) -> Iterator[None]:
        VarmqInstrumentor().instrument(tracer_provider=self.provider)
        try:
            yield
        finally:
            VarmqInstrumentor().uninstrument()

    def exported(self) -> int:
        """Spans exported since :meth:`ready` (the ones the batch processor dropped are not)."""
        self.provider.force_flush()
        return self.exporter.spans - self.before


# -- running the rounds --------------------------------------------------------------------------


@dataclass
class Row(Figure):
    """A :class:`Figure` with the CPU time per job of each run, and for an instrumented row the
    share of the spans made that reached the exporter."""

    cpu: list[float] = field(default_factory=list)
    cpu_baselines: list[float] = field(default_factory=list)
    exported: list[float] = field(default_factory=list)

    def cpu_ratios(self) -> list[float]:
        """Baseline CPU per job over this row's, run by run (above 1: this row is cheaper)."""
        return [b / v for v, b in zip(self.cpu, self.cpu_baselines, strict=True) if v]


def _timed(run: Run, n: int, ready: Ready, context: AbstractContextManager[Any]) -> Timing:
    faulthandler.dump_traceback_later(STUCK_SECONDS, exit=True)
    try:
        with context:
            return run(n, ready)
    finally:
        faulthandler.cancel_dump_traceback_later()


def off_row(measure: Measure, n: int, rounds: int) -> Row:
    """varmq (not instrumented) against its baseline, alternating which goes first."""
    row = Row(measure.name, baseline_name=measure.baseline_name)
    for r in range(rounds):
        got: dict[str, Timing] = {}
        for side in ("varmq", "baseline") if r % 2 == 0 else ("baseline", "varmq"):
            run = measure.varmq if side == "varmq" else measure.baseline
            got[side] = _timed(run, n, _nothing, nullcontext())
        _record(row, got["varmq"], got["baseline"])
    return row


def on_row(measure: Measure, n: int, rounds: int, tracing: Tracing) -> Row:
    """varmq instrumented against varmq not instrumented, alternating which goes first."""
    row = Row(f"{measure.name}, {tracing.processor}", baseline_name="not instrumented")
    for r in range(rounds):
        got: dict[str, Timing] = {}
        for side in ("on", "off") if r % 2 == 0 else ("off", "on"):
            if side == "on":
                got[side] = _timed(measure.varmq, n, tracing.ready, tracing.on())
                if tracing.processor != "unsampled":
                    row.exported.append(tracing.exported() / (n * measure.spans_per_job))
            else:
                got[side] = _timed(measure.varmq, n, _nothing, nullcontext())
        _record(row, got["on"], got["off"])
    return row


def _record(row: Row, ours: Timing, base: Timing) -> None:
    row.values.append(ours.rate)
    row.baselines.append(base.rate)
    row.cpu.append(ours.cpu_us)
    row.cpu_baselines.append(base.cpu_us)
    row.loads.append(load1())
    print(
        f"  {row.name}: {ours.rate:,.0f} against {base.rate:,.0f} jobs/s "
        f"({ours.rate / base.rate:.2f}), load {row.loads[-1]:.2f}",
        file=sys.stderr,
    )


def _table(rows: list[Row], target: float | None) -> None:
    print(
        "| Row | varmq (jobs/s) | baseline | baseline (jobs/s) | ratio | met "
        "| CPU µs/job | baseline CPU µs/job | spans exported |"
    )
    print("|---|---:|---|---:|---:|---|---:|---:|---:|")
    for row in rows:
        ratio = row.ratio()
        met = "-"
        if target is not None and "drain" in row.name:
            met = "yes" if ratio is not None and ratio >= target else "NO"
        exported = spread([100 * e for e in row.exported], ".0f") + "%" if row.exported else "-"
        print(
            f"| {row.name} | {spread(row.values)} | {row.baseline_name} | "
            f"{spread(row.baselines)} | {spread(row.ratios(), '.2f')} | {met} | "
            f"{spread(row.cpu, '.1f')} | {spread(row.cpu_baselines, '.1f')} | {exported} |"
        )


def _size(measure: Measure, args: argparse.Namespace) -> int:
    return int(args.sqlite_n if measure.storage else args.n)


def _warm_up(args: argparse.Namespace) -> None:
    for measure in MEASURES:
        measure.varmq(min(_size(measure, args), 500), _nothing)
        measure.baseline(min(_size(measure, args), 500), _nothing)


def run_off(args: argparse.Namespace) -> list[Row]:
    return [off_row(m, _size(m, args), args.rounds) for m in MEASURES if _wanted(m.name, args.only)]


def run_on(args: argparse.Namespace) -> list[Row]:
    """The instrumented rows, on fewer jobs (a fifth of -n, half of --sqlite-n): a traced job
    takes 10 to 40 times longer in memory."""
    rows = []
    for processor in ("batch", "simple", "unsampled"):
        tracing = Tracing(processor)
        for m in MEASURES:
            if processor == "unsampled" and "drain" not in m.name:
                continue
            if _wanted(f"{m.name}, {processor}", args.only):
                n = args.sqlite_n // 2 if m.storage else args.n // 5
                rows.append(on_row(m, n, args.rounds, tracing))
        tracing.provider.shutdown()
    return rows


def _wanted(name: str, only: list[str]) -> bool:
    return not only or any(text in name for text in only)


# -- old tree against new (--compare) -----------------------------------------------------------


def _child(root: Path, args: argparse.Namespace) -> dict[str, Any]:
    """This script's off part in a process of its own, importing varmq from ``root``."""
    env = dict(os.environ, PYTHONPATH=f"{root}{os.pathsep}{root / 'adapters'}")
    command = [sys.executable, __file__, "--part", "off", "--json"]
    command += ["-n", str(args.n), "--sqlite-n", str(args.sqlite_n), "--rounds", str(args.rounds)]
    for text in args.only:
        command += ["--only", text]
    done = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    if done.returncode != 0:
        raise SystemExit(f"child for {root} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"  {root}: varmq from {result['varmq']}, load {load1():.2f}", file=sys.stderr)
    return result


def compare(old_root: Path, args: argparse.Namespace) -> None:
    """``--pairs`` pairs of child runs, old and new tree alternating which goes first."""
    trees = {"old": old_root.resolve(), "new": (args.new_root or ROOT).resolve()}
    results: dict[str, list[dict[str, Any]]] = {"old": [], "new": []}
    started = uptime()
    for p in range(args.pairs):
        for tree in ("old", "new") if p % 2 == 0 else ("new", "old"):
            results[tree].append(_child(trees[tree], args))
    print()
    print(
        f"not instrumented, old tree ({trees['old']}) against new ({trees['new']}): "
        f"{args.pairs} pairs of processes, each {args.rounds} rounds of {args.n:,} jobs in "
        f"memory, {args.sqlite_n:,} on sqliteq; {machine()}"
    )
    print(f"before: {started}")
    print(f"after:  {uptime()}")
    loads = [
        x for tree in results.values() for r in tree for row in r["rows"] for x in row["loads"]
    ]
    print(f"1-minute load at the runs: {min(loads):.2f}-{max(loads):.2f}")
    print()
    print(
        "| Row | baseline | old (jobs/s) | new (jobs/s) | new/old jobs/s | old ratio | new ratio "
        "| new/old ratio | met | old CPU µs/job | new CPU µs/job | old/new CPU |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|")
    names = [row["name"] for row in results["new"][0]["rows"]]
    for i, name in enumerate(names):
        side = {tree: [Row(**r["rows"][i]) for r in results[tree]] for tree in results}
        rates = {tree: [v for row in side[tree] for v in row.values] for tree in side}
        ratios = {tree: [x for row in side[tree] for x in row.ratios()] for tree in side}
        # Pair by pair: the new process's median over the old one's.
        pair_rates = [
            statistics.median(n.values) / statistics.median(o.values)
            for o, n in zip(side["old"], side["new"], strict=True)
        ]
        pair_ratios = [
            statistics.median(n.ratios()) / statistics.median(o.ratios())
            for o, n in zip(side["old"], side["new"], strict=True)
        ]
        cpu = {tree: [x for row in side[tree] for x in row.cpu] for tree in side}
        pair_cpu = [
            statistics.median(o.cpu) / statistics.median(n.cpu)
            for o, n in zip(side["old"], side["new"], strict=True)
        ]
        met = "yes" if statistics.median(pair_ratios) >= TARGET_OFF else "NO"
        print(
            f"| {name} | {side['new'][0].baseline_name} | {spread(rates['old'])} | "
            f"{spread(rates['new'])} | {spread(pair_rates, '.3f')} | "
            f"{spread(ratios['old'], '.2f')} | {spread(ratios['new'], '.2f')} | "
            f"{spread(pair_ratios, '.3f')} | {met} | {spread(cpu['old'], '.2f')} | "
            f"{spread(cpu['new'], '.2f')} | {spread(pair_cpu, '.3f')} |"
        )
    print()
    print(
        "old/new (jobs/s), old/new ratio: every run of every process of the tree, median "
        "(min-max); ratio: varmq over its baseline in the same process, run by run; new/old: "
        "pair by pair, the new process's median over the old one's; met: the median new/old "
        f"ratio is at least {TARGET_OFF}. CPU: the process's CPU time (all threads) per job over "
        "the timed part, which other work on the machine moves less than the wall clock; old/new "
        "CPU: pair by pair, above 1 when the new tree spends less."
    )


# -- where the time goes -------------------------------------------------------------------------

# (file ending, function, label): the calls --profile gives per job.
PROFILED = [
    ("varmq/engine/thread_runner.py", "_run", "ThreadRunner._run (the whole run)"),
    ("varmq/model/tracing.py", "begin_attempt", "begin_attempt (the consumer span's start)"),
    ("opentelemetry/propagate/__init__.py", "extract", "  propagate.extract"),
    ("opentelemetry/sdk/trace/__init__.py", "start_span", "  Tracer.start_span"),
    ("opentelemetry/sdk/trace/sampling.py", "should_sample", "    samplers (ParentBased)"),
    ("opentelemetry/attributes/__init__.py", "__init__", "    BoundedAttributes()"),
    ("opentelemetry/attributes/__init__.py", "_clean_attribute_value", "      attribute checks"),
    ("opentelemetry/sdk/trace/__init__.py", "start", "    Span.start (processors' on_start)"),
    ("opentelemetry/context/__init__.py", "attach", "  context.attach"),
    ("varmq/otel/_instrumentor.py", "detach", "_Run.detach"),
    ("varmq/model/tracing.py", "end_attempt", "end_attempt (the consumer span's end)"),
    ("opentelemetry/sdk/trace/__init__.py", "set_attribute", "  Span.set_attribute (outcome)"),
    ("opentelemetry/sdk/trace/__init__.py", "end", "  Span.end"),
    ("opentelemetry/sdk/trace/__init__.py", "_readable_span", "    Span._readable_span"),
    ("opentelemetry/sdk/trace/export/__init__.py", "on_end", "    BatchSpanProcessor.on_end"),
    ("opentelemetry/sdk/_shared_internal/__init__.py", "emit", "      BatchProcessor.emit"),
]


def profile(n: int, processor: str, concurrency: int, top: int) -> None:
    """An instrumented in-memory drain of ``n`` jobs under cProfile, a profiler per thread
    started (the worker's); the queue is filled before profiling starts. Each thread's
    profiler counts wall time, a wait for the GIL included: at concurrency 1 the one worker
    thread rarely waits, so its times add up to the run's."""
    tracing = Tracing(processor)
    profilers: list[cProfile.Profile] = []

    def start_thread(*_: object) -> None:
        mine = cProfile.Profile()
        profilers.append(mine)
        mine.enable()

    def ready() -> None:
        tracing.ready()
        threading.setprofile(start_thread)
        main = cProfile.Profile()
        profilers.append(main)
        main.enable()

    with tracing.on():
        timing = memory_drain(n, ready, concurrency)
    for p in profilers:
        p.disable()
    threading.setprofile(None)
    exported = tracing.exported()
    tracing.provider.shutdown()
    stats = pstats.Stats(*profilers, stream=io.StringIO())
    table: dict[tuple[str, int, str], Any] = stats.stats  # type: ignore[attr-defined]

    def total(suffix: str, func: str) -> tuple[float, float, float]:
        calls = own = cumulative = 0.0
        for (filename, _, name), (_, nc, tt, ct, _) in table.items():
            if name == func and filename.endswith(suffix):
                calls, own, cumulative = calls + nc, own + tt, cumulative + ct
        return calls, own, cumulative

    whole = total(*PROFILED[0][:2])[2] or 1.0
    print(
        f"\n### cProfile: instrumented memory drain, {processor} processor, {n:,} jobs, "
        f"c={concurrency} ({timing.rate:,.0f} jobs/s, {timing.cpu_us:.1f} µs CPU a job under "
        f"the profiler; {exported:,} of {n:,} consumer spans exported; load {load1():.2f})\n"
    )
    print("| call | calls/job | µs/job, cumulative | µs/job, own | share of the run |")
    print("|---|---:|---:|---:|---:|")
    for suffix, func, label in PROFILED:
        calls, own, cumulative = total(suffix, func)
        if calls:
            print(
                f"| `{label}` | {calls / n:.2f} | {cumulative / n * 1e6:.2f} | "
                f"{own / n * 1e6:.2f} | {cumulative / whole:.0%} |"
            )
    out = io.StringIO()
    stats.stream = out  # type: ignore[attr-defined]
    stats.sort_stats("tottime").print_stats(top)
    print(f"\n```\n{out.getvalue().strip()}\n```")


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
    """Microseconds per call of what the observer does per add and per run, and its parts,
    with no profiler, in one thread (no GIL handed around, so less than in a drain)."""
    print(f"\nthe observer's calls, µs per call, best of 5 x {number:,} ({machine()})\n")
    print("| processor | call | µs |")
    print("|---|---|---:|")
    for processor in ("batch", "simple", "unsampled"):
        tracing = Tracing(processor)
        with tracing.on():
            for name, fn in _breakdown_calls(tracing):
                print(f"| {processor} | {name} | {_per_call(fn, number):.2f} |")
        tracing.provider.shutdown()
    print()


def _breakdown_calls(tracing: Tracing) -> list[tuple[str, Callable[[], object]]]:
    """The calls :func:`breakdown` times, instrumented with ``tracing``."""
    observer = observe.OBSERVER
    assert observer is not None
    sent = observer.send("bench", "send", None)
    carrier = dict(sent.carrier)
    sent.end("id", None, True)
    job = varmq.Job("0123456789abcdef", None)
    tracer = trace.get_tracer("bench", tracer_provider=tracing.provider)
    span = tracer.start_span("held")  # never ended: a context to inject and attach
    span_context = trace.set_span_in_context(span)
    attributes: dict[str, Any] = {
        "messaging.system": "varmq",
        "messaging.destination.name": "bench",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "varmq.job.attempt": 1,
        "messaging.message.id": "0123456789abcdef",
    }

    def producer() -> None:
        s = observer.send("bench", "send", None)
        s.end("0123456789abcdef", None, True)

    def consumer() -> None:
        attempt = observer.process("bench", job, carrier)
        assert attempt is not None
        attempt.detach()
        attempt.end(None, Outcome.OK)

    def attach_detach() -> None:
        otel_context.detach(otel_context.attach(span_context))

    return [
        ("producer: `send()` + `end()` (per add)", producer),
        ("consumer: `process()` + `detach()` + `end(None, OK)` (per run)", consumer),
        ("  `start_span(name).end()`, no attributes", lambda: tracer.start_span("x").end()),
        (
            "  `start_span(name, kind, 6 attributes).end()`",
            lambda: tracer.start_span("x", kind=SpanKind.CONSUMER, attributes=attributes).end(),
        ),
        ("  `propagate.extract(carrier)`", lambda: propagate.extract(carrier)),
        ("  `propagate.inject({}, context)`", lambda: propagate.inject({}, span_context)),
        ("  `context.attach(context)` + `detach`", attach_detach),
        ("  `trace.set_span_in_context(span)`", lambda: trace.set_span_in_context(span)),
        ("  `span.set_attribute(key, value)`", lambda: span.set_attribute("k", "v")),
    ]


# -- main ----------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=50_000, help="jobs per in-memory run (50000)")
    parser.add_argument("--sqlite-n", type=int, default=5_000, help="jobs per sqliteq run (5000)")
    parser.add_argument("--rounds", type=int, default=5, help="paired runs per row (5)")
    parser.add_argument(
        "--quick", action="store_true", help="5,000 / 500 jobs, 2 rounds, 1 pair: a few seconds"
    )
    parser.add_argument(
        "--part", choices=("off", "on", "all"), default="all", help="which rows (all)"
    )
    parser.add_argument(
        "--only", action="append", default=[], metavar="TEXT", help="rows naming TEXT"
    )
    parser.add_argument(
        "--compare", type=Path, metavar="OLD_ROOT", help="the off part, old tree against this"
    )
    parser.add_argument(
        "--new-root", type=Path, metavar="ROOT", help="the new tree for --compare (this one)"
    )
    parser.add_argument("--pairs", type=int, default=3, help="process pairs for --compare (3)")
    parser.add_argument("--profile", action="store_true", help="cProfile an instrumented drain")
    parser.add_argument(
        "--processor", choices=("batch", "simple"), default="batch", help="for --profile"
    )
    parser.add_argument(
        "--profile-c", type=int, default=1, help="the profiled drain's concurrency (1)"
    )
    parser.add_argument("--top", type=int, default=20, help="functions listed by --profile")
    parser.add_argument("--breakdown", action="store_true", help="the observer's calls, per call")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.sqlite_n, args.rounds, args.pairs = 5_000, 500, 2, 1
    # The batch processor's "Queue full, dropping" warning goes to stderr once every 20 s; it is
    # left on, as it is in an application (the share of spans exported is in the table).
    logging.basicConfig(level=logging.WARNING)
    if args.compare:
        compare(args.compare, args)
        return 0
    if args.profile or args.breakdown:
        if not TRACING:
            raise SystemExit("--profile and --breakdown need varmq.otel and the OpenTelemetry SDK")
        if args.breakdown:
            breakdown(5_000 if args.quick else 50_000)
        if args.profile:
            profile(args.n, args.processor, args.profile_c, args.top)
        return 0

    started = uptime()
    _warm_up(args)
    off = run_off(args) if args.part in ("off", "all") else []
    on = run_on(args) if args.part in ("on", "all") and TRACING else []
    if args.json:
        print(json.dumps({"varmq": varmq.__file__, "rows": [asdict(row) for row in off]}))
        return 0
    print()
    print(
        f"varmq from {Path(varmq.__file__).parent}; {args.n:,} jobs a run in memory, "
        f"{args.sqlite_n:,} on sqliteq (instrumented rows: {args.n // 5:,} and "
        f"{args.sqlite_n // 2:,}), concurrency {CONCURRENCY} unless the row says; "
        f"{args.rounds} paired rounds, median (min-max); {machine()}; "
        f"SQLite {sqlite3.sqlite_version}"
    )
    print(f"before: {started}")
    print(f"after:  {uptime()}")
    loads = [load for row in off + on for load in row.loads]
    if loads:
        print(f"1-minute load at the runs: {min(loads):.2f}-{max(loads):.2f}")
    if off:
        print("\nnot instrumented, against baselines in this process:\n")
        _table(off, None)
    if on:
        print("\ninstrumented (SDK, no-op exporter) against not instrumented:\n")
        _table(on, TARGET_ON)
    elif not TRACING:
        print("\n(no varmq.otel in this tree: no instrumented rows)")
    print()
    print(
        "ratio: varmq jobs/s over the baseline's (instrumented over not instrumented), run by "
        f"run; met: an instrumented drain's median ratio is at least {TARGET_ON}. CPU: this "
        "process's CPU time (all its threads) per job over the timed part. spans exported: "
        "of the spans the timed part made, the share the no-op exporter got (the batch "
        "processor drops what overflows its queue of 2,048). unsampled: a TracerProvider "
        "whose sampler is ALWAYS_OFF (spans made, none recorded)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
