"""varmq across processes, the way it is deployed: producer and consumers in separate processes.

Every consumer job appends one byte to a file (``os.write`` on an ``O_APPEND`` descriptor); the
parent process, which runs no job, watches the file's size and times the work from outside: from
the first byte to the last. Each figure has a baseline measured in the same run, on the same
Redis or the same disk, by a raw-client program doing the same work in the same kind of process
(raw redis-py, raw ``sqlite3``); figures and baselines alternate, and each is repeated (3 times
by default) so that the spread on a shared machine shows. The 1-minute load average is recorded
with every run.

Measures (``--only`` picks by name):

- ``add``: single add rate of a producer process, one thread, one ``add`` per job, timed by the
  parent from "go" to "done" on the producer's pipes. redisq against an unpipelined
  ``LPUSH`` loop, sqliteq against autocommit ``INSERT`` (WAL, ``synchronous=NORMAL``).
- ``threads``: the same producer with 8 threads sharing one handle, against the 1-thread figure.
- ``drain``: the queue filled first (20,000 jobs), then one consumer process at concurrency 8
  started; first to last job timed from outside. Baselines: a raw consumer process looping
  ``LMOVE`` + ``LREM`` (redis-py) or ``DELETE ... RETURNING`` (sqlite3).
- ``latency``: an idle consumer process; the parent adds one job every 10 ms carrying
  ``time.time_ns()``; the job writes its start time next to it. p50 and p99 of start - add.
- ``idle``: the CPU an idle sqliteq consumer process uses (``utime + stime`` from
  ``/proc/<pid>/stat`` over 10 s, Linux only) in % of one CPU, against the raw consumer
  process polling every 1 ms.
- ``fair``: three consumer processes on one queue, 20 ms jobs, 3,000 jobs added once all three
  listen: each one's share, and the most jobs it held at once (taken and not finished).
- ``roundtrip``: in memory, in this process: ``add(i).result()`` at concurrency 1 against
  ``ThreadPoolExecutor(1).submit(f, i).result()``.
- ``memory``: RSS growth per queued in-memory job (1,000,000 int payloads, a fresh subprocess
  per measure), FIFO and priority queue, against ``queue.SimpleQueue``.

``--profile DIR`` also runs the drain's consumer processes under py-spy (if installed) and prints
the functions that took the most samples. Redis: a redis-server started here on a free loopback
port (``tests/support/redis_server.py``), never a Redis of yours. Run from the repository root::

    .venv/bin/python benchmarks/cross_process.py              # everything: 2-3 minutes
    .venv/bin/python benchmarks/cross_process.py --quick      # fewer jobs: about a minute
    .venv/bin/python benchmarks/cross_process.py --only drain --profile /tmp/prof
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import faulthandler
import gc
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _common
import _sqliteq_split
from _common import Figure, load1, spread

_common.setup_path()

HERE = Path(__file__).resolve()
CONCURRENCY = 8
THREADS = 8
PICKUP_INTERVAL = 0.010
FAIR_SLEEP = 0.020
FAIR_CONSUMERS = 3
WATCH_POLL = 0.0005

TARGETS = {
    "add redisq": 0.8,
    "add sqliteq": 0.6,
    "threads redisq": 2.5,
    "threads sqliteq": 3.0,
    "drain redisq": 12_000.0,  # jobs/s, absolute
    "roundtrip": 1.0,
}
LATENCY_TARGETS = {"redisq": (1.0, 3.0), "sqliteq": (2.0, 5.0)}  # ms: p50, p99
IDLE_SECONDS = 10.0
IDLE_TARGET = 1.0  # % of one CPU
MEMORY_TARGETS = {"fifo": 160.0, "priority": 200.0}  # bytes per job
FAIR_TOLERANCE = 0.15
RAW_PICKUP = {
    "redisq": "raw BLMOVE consumer process",
    "sqliteq": "raw consumer process polling every 1 ms",
}


# == child processes ============================================================================
#
# ``cross_process.py --child ROLE SPEC``: SPEC is a JSON object. A child prints "ready" once set
# up; a producer then waits for "go" on stdin and prints "done"; a consumer runs until its stdin
# closes and prints one JSON line of what it counted.


def _open_raw_sqlite(path: str, create: bool) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    if create:
        conn.execute("CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, data BLOB NOT NULL)")
    return conn


def _storage(spec: dict[str, Any]) -> tuple[Any, Any]:
    """``(queues, stored distributed queue)`` of the spec's adapter."""
    if spec["adapter"] == "redisq":
        import redisq

        queues = redisq.new(spec["url"])
    else:
        import sqliteq

        queues = sqliteq.new(spec["path"])
    return queues, queues.new_distributed_queue(spec["queue"])


def child_produce(spec: dict[str, Any]) -> None:
    n, threads, kind = spec["n"], spec["threads"], spec["kind"]
    closers: list[Callable[[], Any]] = []
    if kind == "varmq":
        import varmq

        queues, stored = _storage(spec)
        closers.append(queues.close)
        add = varmq.new_distributed_queue(stored).add

        def run(count: int) -> None:
            for _ in range(count):
                add(None)

    elif kind == "raw" and spec["adapter"] == "redisq":
        import redis

        client = redis.Redis.from_url(spec["url"])
        closers.append(client.close)
        key, payload = spec["queue"], spec["payload"].encode()

        def run(count: int) -> None:
            lpush = client.lpush
            for _ in range(count):
                lpush(key, payload)

    else:
        payload = spec["payload"].encode()
        conns = [_open_raw_sqlite(spec["path"], True) for _ in range(threads)]
        closers.extend(conn.close for conn in conns)
        free = list(conns)

        def run(count: int) -> None:
            execute = free.pop().execute  # one connection per thread
            for _ in range(count):
                execute("INSERT INTO jobs (data) VALUES (?)", (payload,))

    shares = [n // threads + (1 if i < n % threads else 0) for i in range(threads)]
    gc.collect()
    print("ready", flush=True)
    sys.stdin.readline()  # "go"
    if threads == 1:
        run(n)
    else:
        workers = [threading.Thread(target=run, args=(share,)) for share in shares]
        for t in workers:
            t.start()
        for t in workers:
            t.join()
    print("done", flush=True)
    for close in closers:
        close()


class Holding:
    """Jobs this consumer took from storage and has not finished: now and the most at once."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now = 0
        self.most = 0
        self.taken = 0

    def wrap_take(self, stored: Any) -> None:
        take = stored.dequeue_batch_with_attempts

        def counted(n: int) -> Any:
            got = take(n)
            with self.lock:
                self.taken += len(got)
                self.now += len(got)
                self.most = max(self.most, self.now)
            return got

        stored.dequeue_batch_with_attempts = counted  # on this instance only

    def finished(self) -> None:
        with self.lock:
            self.now -= 1


def child_consume(spec: dict[str, Any]) -> None:
    kind, mode = spec["kind"], spec["mode"]
    fd = os.open(spec["out"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    write, time_ns = os.write, time.time_ns
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    report: dict[str, Any] = {}
    if kind == "varmq":
        import varmq

        holding = Holding()
        if mode == "latency":

            def job_fn(job: Any) -> None:
                started = time_ns()
                write(fd, f"{job.data} {started}\n".encode())
                holding.finished()

        elif mode == "fair":

            def job_fn(job: Any) -> None:
                time.sleep(FAIR_SLEEP)
                write(fd, b"x")
                holding.finished()

        else:

            def job_fn(job: Any) -> None:
                write(fd, b"x")
                holding.finished()

        queues, stored = _storage(spec)
        holding.wrap_take(stored)
        worker = varmq.new_worker(job_fn, spec["concurrency"], auto_run=False)
        worker.with_distributed_queue(stored)
        worker.start()
        print("ready", flush=True)
        stop.wait()
        worker.stop_and_wait()
        queues.close()
        # -1: the worker took its jobs through another call than the one counted
        report = {"most_held": holding.most if holding.taken else -1, "taken": holding.taken}
    elif spec["adapter"] == "redisq":
        import redis

        client = redis.Redis.from_url(spec["url"])
        source, processing = spec["queue"], spec["queue"] + ":processing"
        print("ready", flush=True)
        blmove, lrem = client.blmove, client.lrem
        while not stop.is_set():
            item = blmove(source, processing, 0.1, "RIGHT", "LEFT")
            if item is None:
                continue
            if mode == "latency":
                started = time_ns()
                write(fd, item + f" {started}\n".encode())
            else:
                write(fd, b"x")
            lrem(processing, 1, item)
        client.close()
    else:
        conn = _open_raw_sqlite(spec["path"], False)
        execute = conn.execute
        take = "DELETE FROM jobs WHERE id = (SELECT min(id) FROM jobs) RETURNING data"
        print("ready", flush=True)
        while not stop.is_set():
            row = execute(take).fetchone()  # autocommit: one transaction per job
            if row is None:
                time.sleep(0.001)
                continue
            if mode == "latency":
                started = time_ns()
                write(fd, row[0] + f" {started}\n".encode())
            else:
                write(fd, b"x")
        conn.close()
    os.close(fd)
    print(json.dumps(report), flush=True)


def child_memory(spec: dict[str, Any]) -> None:
    import queue

    import varmq

    n, which = spec["n"], spec["which"]

    def rss() -> int:
        gc.collect()
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    if which == "simple":
        q: Any = queue.SimpleQueue()
        put: Callable[..., Any] = q.put
        put(-1)
        before = rss()
        for i in range(n):
            put(i)
    else:
        worker = varmq.new_worker(lambda job: None, 1, auto_run=False)
        if which == "fifo":
            put = worker.bind_queue().add
            put(-1)
            before = rss()
            for i in range(n):
                put(i)
        else:
            put = worker.bind_priority_queue().add
            put(-1, 0)
            before = rss()
            for i in range(n):
                put(i, i % 10)
    after = rss()
    print(json.dumps({"per_job": (after - before) / n}), flush=True)


# == the parent =================================================================================


class Child:
    """A child process of this script, talking over its stdin and stdout."""

    def __init__(
        self, role: str, spec: dict[str, Any], profile: Path | None = None, gil: bool = False
    ) -> None:
        cmd = [sys.executable, str(HERE), "--child", role, json.dumps(spec)]
        if profile is not None:
            spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
            cmd = [
                spy,
                "record",
                "--nonblocking",
                "--format",
                "raw",
                "-r",
                "250",
                "-o",
                str(profile),
            ]
            cmd += ["--gil", "--"] if gil else ["--"]
            cmd += [sys.executable, str(HERE), "--child", role, json.dumps(spec)]
        env = dict(os.environ, PYTHONPATH=f"{_common.ROOT}{os.pathsep}{_common.ROOT / 'adapters'}")
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )

    def expect(self, word: str) -> None:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        while line.startswith("py-spy>") or (not line and self.proc.poll() is None):
            line = self.proc.stdout.readline().strip()
        if line != word:
            self.proc.kill()
            raise SystemExit(f"benchmark error: child said {line!r}, expected {word!r}")

    def send(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self) -> dict[str, Any]:
        """Close its stdin (a consumer stops), read its last line, wait for it."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        out = self.proc.stdout.read().strip().splitlines()
        if self.proc.wait(timeout=120) != 0:
            raise SystemExit(f"benchmark error: a child exited with {self.proc.returncode}")
        return json.loads(out[-1]) if out and out[-1].startswith("{") else {}


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_size(
    paths: list[Path], total: int, timeout: float, children: list[Child]
) -> tuple[float, float]:
    """Watch the files until their sizes add up to ``total``: (first byte, last byte) times."""
    deadline = time.monotonic() + timeout
    first = None
    while True:
        size = sum(p.stat().st_size if p.exists() else 0 for p in paths)
        now = time.perf_counter()
        if size and first is None:
            first = now
        if size >= total:
            assert first is not None
            return first, now
        if time.monotonic() > deadline or any(c.proc.poll() is not None for c in children):
            raise SystemExit(f"benchmark error: {size} of {total} jobs done; a consumer died?")
        time.sleep(WATCH_POLL)


class Bench:
    def __init__(self, url: str, directory: Path, args: argparse.Namespace) -> None:
        self.url = url
        self.dir = directory
        self.args = args
        self.runs = 0
        self.payload = ""  # the envelope varmq stores for add(None); the raw clients store it too
        self._client: Any = None
        self.server_usec: dict[str, list[str]] = {"varmq": [], "raw": []}

    def spec(self, adapter: str, **extra: Any) -> dict[str, Any]:
        self.runs += 1
        name = f"bench-{self.runs}"
        spec: dict[str, Any] = {"adapter": adapter, "queue": name, **extra}
        if adapter == "redisq":
            spec["url"] = self.url
        else:
            spec["path"] = str(self.dir / f"{name}.db")
            if extra.get("kind") != "raw":
                import sqliteq

                sqliteq.new(spec["path"]).close()  # the file, made before the children open it
        return spec

    def cleanup(self, spec: dict[str, Any]) -> None:
        if spec["adapter"] == "redisq":
            import redis

            with redis.Redis.from_url(self.url) as client:
                client.flushdb()
        else:
            for suffix in ("", "-wal", "-shm"):
                Path(spec["path"] + suffix).unlink(missing_ok=True)

    # -- helpers ----------------------------------------------------------------------------

    def stored_count(self, spec: dict[str, Any], raw: bool) -> int:
        if raw and spec["adapter"] == "redisq":
            import redis

            with redis.Redis.from_url(self.url) as client:
                return int(client.llen(spec["queue"]))
        if raw:
            with sqlite3.connect(spec["path"]) as conn:
                return int(conn.execute("SELECT count(*) FROM jobs").fetchone()[0])
        queues, stored = _storage(spec)
        try:
            return len(stored)
        finally:
            queues.close()

    def learn_payload(self) -> None:
        import redisq
        import varmq

        with redisq.new(self.url) as queues:
            stored = queues.new_distributed_queue("payload")
            varmq.new_distributed_queue(stored).add(None)
            self.payload = stored.values()[0].decode()
        self.cleanup({"adapter": "redisq"})

    def fill(self, spec: dict[str, Any], n: int, raw: bool) -> None:
        data = self.payload.encode()
        if raw and spec["adapter"] == "redisq":
            import redis

            with redis.Redis.from_url(self.url) as client:
                pipe = client.pipeline(transaction=False)
                for _ in range(n):
                    pipe.lpush(spec["queue"], data)
                pipe.execute()
        elif raw:
            conn = _open_raw_sqlite(spec["path"], True)
            with conn:
                conn.execute("BEGIN")
                conn.executemany("INSERT INTO jobs (data) VALUES (?)", [(data,)] * n)
                conn.execute("COMMIT")
            conn.close()
        else:
            queues, stored = _storage(spec)
            try:
                if hasattr(stored, "enqueue_many"):
                    for start in range(0, n, 1000):
                        stored.enqueue_many([data] * min(1000, n - start))
                else:
                    for _ in range(n):
                        stored.enqueue(data)
            finally:
                queues.close()
        got = self.stored_count(spec, raw)
        if got != n:
            raise SystemExit(f"benchmark error: filled {got} jobs, expected {n}")

    # -- measures ---------------------------------------------------------------------------

    def produce(
        self, adapter: str, kind: str, threads: int, n: int, profile: Path | None = None
    ) -> float:
        spec = self.spec(adapter, kind=kind, threads=threads, n=n, payload=self.payload)
        if kind == "raw" and adapter == "sqliteq":
            _open_raw_sqlite(spec["path"], True).close()
        try:
            child = Child("produce", spec, profile)
            child.expect("ready")
            if adapter == "redisq":
                self._redis().config_resetstat()
            start = time.perf_counter()
            child.send("go")
            child.expect("done")
            elapsed = time.perf_counter() - start
            if adapter == "redisq" and threads == 1:
                self.server_usec[kind].extend(self._server_usec_per_call())
            child.finish()
            got = self.stored_count(spec, kind == "raw")
            if got != n:
                raise SystemExit(f"benchmark error: {adapter} {kind} stored {got} of {n}")
            return n / elapsed
        finally:
            self.cleanup(spec)

    def _redis(self) -> Any:
        import redis

        if self._client is None:
            self._client = redis.Redis.from_url(self.url)
        return self._client

    def _server_usec_per_call(self) -> list[str]:
        """What Redis spent per call of each command since the last reset (INFO commandstats)."""
        stats = self._redis().info("commandstats")
        return [
            f"{name.removeprefix('cmdstat_')} {fields['usec_per_call']:.1f} us x {fields['calls']}"
            for name, fields in stats.items()
            if name in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_lpush", "cmdstat_fcall")
        ]

    def drain(
        self, adapter: str, kind: str, n: int, profile: Path | None = None, gil: bool = False
    ) -> float:
        spec = self.spec(adapter, kind=kind, mode="byte", concurrency=CONCURRENCY)
        out = self.dir / f"{spec['queue']}.out"
        spec["out"] = str(out)
        try:
            self.fill(spec, n, kind == "raw")
            child = Child("consume", spec, profile, gil)
            first, last = wait_size([out], n, 300, [child])
            child.finish()
            return (n - 1) / (last - first)
        finally:
            out.unlink(missing_ok=True)
            self.cleanup(spec)

    @contextlib.contextmanager
    def waiting_consumer(
        self, adapter: str, kind: str, settle: float
    ) -> Iterator[tuple[Child, dict[str, Any], Path]]:
        """A consumer process in latency mode, ready and left alone ``settle`` seconds:
        ``(child, spec, its output file)``."""
        spec = self.spec(adapter, kind=kind, mode="latency", concurrency=CONCURRENCY)
        out = self.dir / f"{spec['queue']}.out"
        spec["out"] = str(out)
        if kind == "raw" and adapter == "sqliteq":
            _open_raw_sqlite(spec["path"], True).close()
        try:
            child = Child("consume", spec)
            child.expect("ready")
            time.sleep(settle)  # let it settle into waiting
            yield child, spec, out
        finally:
            out.unlink(missing_ok=True)
            self.cleanup(spec)

    def latency(self, adapter: str, count: int, kind: str = "varmq") -> tuple[float, float]:
        with self.waiting_consumer(adapter, kind, 0.5) as (child, spec, out):
            add, close = self._adder(spec, kind)
            warmup = 10
            next_at = time.perf_counter()
            for _ in range(count + warmup):
                next_at += PICKUP_INTERVAL
                add(time.time_ns())
                pause = next_at - time.perf_counter()
                if pause > 0:
                    time.sleep(pause)
            close()
            deadline = time.monotonic() + 30
            while _lines(out) < count + warmup and time.monotonic() < deadline:
                time.sleep(0.01)
            child.finish()
            pairs = [line.split() for line in out.read_text().splitlines()]
            delays = sorted((int(s) - int(a)) / 1e6 for a, s in pairs)
            if len(delays) != count + warmup:
                raise SystemExit(f"benchmark error: {len(delays)} pickups of {count + warmup}")
            pairs_sorted = sorted(pairs, key=lambda p: int(p[0]))[warmup:]
            delays = sorted((int(s) - int(a)) / 1e6 for a, s in pairs_sorted)
            p50 = delays[len(delays) // 2]
            p99 = delays[min(len(delays) - 1, int(len(delays) * 0.99))]
            return p50, p99

    def idle(self, adapter: str, kind: str) -> float:
        """% of one CPU that an idle consumer process uses over ``IDLE_SECONDS``."""
        with self.waiting_consumer(adapter, kind, 1.0) as (child, _, _):
            before, started = _cpu_seconds(child.proc.pid), time.monotonic()
            time.sleep(IDLE_SECONDS)
            after, ended = _cpu_seconds(child.proc.pid), time.monotonic()
            child.finish()
            return 100 * (after - before) / (ended - started)

    def _adder(self, spec: dict[str, Any], kind: str) -> tuple[Callable[[int], Any], Any]:
        """``(add(number), close)``: a varmq handle's add, or the raw client's push."""
        if kind == "varmq":
            import varmq

            queues, stored = _storage(spec)
            return varmq.new_distributed_queue(stored).add, queues.close
        if spec["adapter"] == "redisq":
            import redis

            client = redis.Redis.from_url(self.url)
            key = spec["queue"]
            return (lambda number: client.lpush(key, str(number))), client.close
        conn = _open_raw_sqlite(spec["path"], False)
        insert = "INSERT INTO jobs (data) VALUES (?)"
        return (lambda number: conn.execute(insert, (str(number).encode(),))), conn.close

    def fair(self, adapter: str, n: int) -> tuple[list[int], list[int]]:
        spec = self.spec(adapter, kind="varmq", mode="fair", concurrency=CONCURRENCY)
        outs = [self.dir / f"{spec['queue']}.{i}.out" for i in range(FAIR_CONSUMERS)]
        children = []
        try:
            for out in outs:
                children.append(Child("consume", dict(spec, out=str(out))))
            for child in children:
                child.expect("ready")
            time.sleep(0.3)
            self._add_all(spec, n)  # while they listen: no count to check, they take at once
            wait_size(outs, n, 300, children)
            reports = [child.finish() for child in children]
            shares = [out.stat().st_size for out in outs]
            return shares, [int(r.get("most_held", -1)) for r in reports]
        finally:
            for out in outs:
                out.unlink(missing_ok=True)
            self.cleanup(spec)

    def _add_all(self, spec: dict[str, Any], n: int) -> None:
        queues, stored = _storage(spec)
        try:
            data = self.payload.encode()
            if hasattr(stored, "enqueue_many"):
                stored.enqueue_many([data] * n)
            else:
                for _ in range(n):
                    stored.enqueue(data)
        finally:
            queues.close()


def _lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def identity(job: Any) -> Any:
    return job.data


def plain_identity(x: Any) -> Any:
    return x


def roundtrip_varmq(n: int) -> float:
    import varmq

    worker = varmq.new_result_worker(identity, 1)
    add = worker.bind_queue().add
    gc.collect()
    start = time.perf_counter()
    for i in range(n):
        job = add(i)
        assert job is not None and job.result() == i
    elapsed = time.perf_counter() - start
    worker.stop_and_wait()
    return n / elapsed


def roundtrip_executor(n: int) -> float:
    executor = ThreadPoolExecutor(1)
    submit = executor.submit
    gc.collect()
    start = time.perf_counter()
    for i in range(n):
        assert submit(plain_identity, i).result() == i
    elapsed = time.perf_counter() - start
    executor.shutdown(wait=True)
    return n / elapsed


def memory_per_job(which: str, n: int) -> float:
    env = dict(os.environ, PYTHONPATH=f"{_common.ROOT}{os.pathsep}{_common.ROOT / 'adapters'}")
    spec = json.dumps({"which": which, "n": n})
    out = subprocess.run(
        [sys.executable, str(HERE), "--child", "memory", spec],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    return float(json.loads(out.strip().splitlines()[-1])["per_job"])


# == profiles ===================================================================================


def summarize_profile(path: Path, top: int = 10) -> list[str]:
    """The functions with the most samples in a py-spy ``--format raw`` file (collapsed stacks).

    Start-up (imports) and threads parked in a wait (``Condition.wait``, the stdin watcher) are
    counted apart; of the rest: own samples (the function itself was running, or the C call it
    made) and inclusive ones (it was on the stack), the latter for the library's frames only.
    """
    own: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    total = busy = parked = starting = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        total += count
        frames = [f for f in (_frame(f) for f in stack.split(";")) if f]
        if not frames:
            continue
        if any(f.startswith("_find_and_load") for f in frames):
            starting += count
            continue
        if frames[-1].split(" ")[0] in _WAITS or "<lambda> (benchmarks/" in frames[-1]:
            parked += count
            continue
        busy += count
        own[frames[-1]] += count
        for frame in set(frames):
            if any(lib in frame for lib in ("varmq/", "sqliteq/", "redisq/", "redis/")):
                inclusive[frame] += count
    if not busy:
        return [f"{total} samples, none busy"]
    lines = [
        f"{total} samples: {starting} start-up, {parked} parked in a wait, {busy} busy "
        "(percentages of busy)",
        "own samples:",
    ]
    lines += [f"  {100 * c / busy:5.1f}%  {f}" for f, c in own.most_common(top)]
    lines.append("inclusive samples, library frames:")
    lines += [f"  {100 * c / busy:5.1f}%  {f}" for f, c in inclusive.most_common(top)]
    return lines


_WAITS = {"Condition.wait", "Event.wait", "Thread.join", "ThreadRunner._park"}


def _frame(frame: str) -> str:
    """``fn (path/to/mod.py:12)`` -> ``fn (mod.py)``; thread and process frames dropped."""
    if frame.startswith(("process ", "thread ")):
        return ""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    parts = Path(where).parts
    short = "/".join(parts[-2:]) if len(parts) >= 2 else where
    if short.endswith("cross_process.py"):
        short = "benchmarks/cross_process.py"
    return f"{name} ({short})"


# == main =======================================================================================


def _met(ok: bool) -> str:
    return "yes" if ok else "NO"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", nargs=2, metavar=("ROLE", "SPEC"), help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="fewer jobs: about a minute")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure (default 3)")
    parser.add_argument("--only", action="append", default=[], help="measures whose name has this")
    parser.add_argument("--profile", type=Path, help="py-spy profiles of the drain consumers here")
    args = parser.parse_args(argv)
    if args.child:
        role, spec = args.child
        {"produce": child_produce, "consume": child_consume, "memory": child_memory}[role](
            json.loads(spec)
        )
        return 0
    faulthandler.dump_traceback_later(900, exit=True)
    q = args.quick
    n_add = 2_000 if q else 5_000
    n_drain = 5_000 if q else 20_000
    n_pickups = 100 if q else 200
    n_fair = 900 if q else 3_000
    n_round = 5_000 if q else 10_000
    n_memory = 200_000 if q else 1_000_000

    def wanted(name: str) -> bool:
        return not args.only or any(word in name for word in args.only)

    import redis

    from tests.support.redis_server import RedisServer

    server = RedisServer()
    server.start()
    directory = Path(tempfile.mkdtemp(prefix="varmq-xproc-"))
    with redis.Redis.from_url(server.url) as client:
        redis_version = client.info("server")["redis_version"]
    print(
        f"cross-process benchmark: {_common.machine()}; Redis {redis_version} on "
        f"{server.url}; SQLite {sqlite3.sqlite_version} in {directory}; {args.repeat} runs per "
        f"figure; {'quick' if q else 'full'}"
    )
    print(f"uptime at start: {_common.uptime()}")
    figures: list[Figure] = []
    notes: list[str] = []
    bench = Bench(server.url, directory, args)
    clock = [time.monotonic()]

    def section(name: str) -> None:
        now = time.monotonic()
        notes.append(f"({name}: {now - clock[0]:.0f} s)")
        clock[0] = now

    try:
        bench.learn_payload()
        for adapter, raw_name in (("redisq", "LPUSH, unpipelined"), ("sqliteq", "INSERT, own tx")):
            if wanted(f"add {adapter}") or wanted(f"threads {adapter}"):
                single = Figure(f"add {adapter}, 1 thread", baseline_name=raw_name)
                single.target = f">= {TARGETS['add ' + adapter]}x"
                many = Figure(f"add {adapter}, {THREADS} threads", baseline_name="1 thread")
                many.target = f">= {TARGETS['threads ' + adapter]}x"
                for i in range(args.repeat):
                    order = [("varmq", 1), ("raw", 1), ("varmq", THREADS)]
                    if i % 2:
                        order.reverse()
                    rates = {}
                    for kind, threads in order:
                        rates[kind, threads] = bench.produce(adapter, kind, threads, n_add)
                    load = load1()
                    single.values.append(rates["varmq", 1])
                    single.baselines.append(rates["raw", 1])
                    single.loads.append(load)
                    many.values.append(rates["varmq", THREADS])
                    many.baselines.append(rates["varmq", 1])
                    many.loads.append(load)
                figures += [single, many]
                if adapter == "redisq":
                    for kind, calls in bench.server_usec.items():
                        notes.append(f"redis-server time per call, {kind} single add: {calls}")
                else:
                    notes += _sqliteq_split.split(directory, n_add, args.repeat)
                if args.profile is not None:
                    args.profile.mkdir(parents=True, exist_ok=True)
                    path = args.profile / f"add-{adapter}-varmq.txt"
                    rate = bench.produce(adapter, "varmq", 1, n_add, profile=path)
                    if path.exists():
                        notes.append(
                            f"profile of the varmq {adapter} producer, 1 thread ({rate:,.0f} "
                            "jobs/s under py-spy):"
                        )
                        notes += ["  " + line for line in summarize_profile(path)]
                section(f"add {adapter}")
        for adapter, raw_name in (
            ("redisq", "raw BLMOVE+LREM process"),
            ("sqliteq", "raw DELETE..RETURNING process"),
        ):
            if wanted(f"drain {adapter}"):
                fig = Figure(f"drain {adapter}, c={CONCURRENCY}", baseline_name=raw_name)
                fig.target = ">= 12,000 jobs/s" if adapter == "redisq" else "report"
                for i in range(args.repeat):
                    sides = ["varmq", "raw"] if i % 2 == 0 else ["raw", "varmq"]
                    rates = {kind: bench.drain(adapter, kind, n_drain) for kind in sides}
                    fig.values.append(rates["varmq"])
                    fig.baselines.append(rates["raw"])
                    fig.loads.append(load1())
                figures.append(fig)
                if args.profile is not None:
                    args.profile.mkdir(parents=True, exist_ok=True)
                    for kind, gil in (("varmq", False), ("varmq", True), ("raw", False)):
                        which = f"{kind}{'-gil' if gil else ''}"
                        path = args.profile / f"drain-{adapter}-{which}.txt"
                        rate = bench.drain(adapter, kind, n_drain, profile=path, gil=gil)
                        deadline = time.monotonic() + 10
                        while not path.exists() and time.monotonic() < deadline:
                            time.sleep(0.1)
                        if path.exists():
                            what = "samples of the thread holding the GIL" if gil else "all threads"
                            notes.append(
                                f"profile of the {kind} {adapter} drain consumer ({what}; "
                                f"{rate:,.0f} jobs/s under py-spy):"
                            )
                            notes += ["  " + line for line in summarize_profile(path)]
                section(f"drain {adapter}")
        for adapter in ("redisq", "sqliteq"):
            if wanted(f"latency {adapter}"):
                got: dict[tuple[str, str], list[float]] = collections.defaultdict(list)
                loads = []
                for i in range(args.repeat):
                    for kind in ("varmq", "raw") if i % 2 == 0 else ("raw", "varmq"):
                        p50, p99 = bench.latency(adapter, n_pickups, kind)
                        got[kind, "p50"].append(p50)
                        got[kind, "p99"].append(p99)
                    loads.append(load1())
                want50, want99 = LATENCY_TARGETS[adapter]
                for label, want in (("p50", want50), ("p99", want99)):
                    fig = Figure(f"pickup {adapter} {label}", unit="ms", target=f"<= {want} ms")
                    fig.baseline_name = RAW_PICKUP[adapter]
                    fig.values = got["varmq", label]
                    fig.baselines = got["raw", label]
                    fig.loads = loads
                    figures.append(fig)
                section(f"latency {adapter}")
        if wanted("idle sqliteq") and Path("/proc/self/stat").exists():
            fig = Figure("idle sqliteq consumer CPU", unit="% CPU", target=f"< {IDLE_TARGET:g}%")
            fig.baseline_name = RAW_PICKUP["sqliteq"]
            for i in range(args.repeat):
                sides = ["varmq", "raw"] if i % 2 == 0 else ["raw", "varmq"]
                cpu = {kind: bench.idle("sqliteq", kind) for kind in sides}
                fig.values.append(cpu["varmq"])
                fig.baselines.append(cpu["raw"])
                fig.loads.append(load1())
            figures.append(fig)
            section("idle sqliteq")
        for adapter in ("redisq", "sqliteq"):
            if wanted(f"fair {adapter}"):
                fig = Figure(
                    f"fair {adapter}, {FAIR_CONSUMERS} consumers", unit="share spread", target=""
                )
                fig.target = f"each share within +-{FAIR_TOLERANCE:.0%} of 1/{FAIR_CONSUMERS}"
                held_all: list[int] = []
                worst: list[float] = []
                for _ in range(args.repeat):
                    shares, held = bench.fair(adapter, n_fair)
                    third = n_fair / FAIR_CONSUMERS
                    worst.append(max(abs(s - third) / third for s in shares))
                    held_all += held
                    fig.loads.append(load1())
                    notes.append(f"fair {adapter}: shares {shares}, most held at once {held}")
                fig.values = worst
                held_text = (
                    f"{min(held_all)}-{max(held_all)}" if min(held_all) >= 0 else "not counted"
                )
                fig.note = (
                    f"most held at once {held_text} (concurrency + prefetch = {2 * CONCURRENCY})"
                )
                figures.append(fig)
                section(f"fair {adapter}")
        if wanted("roundtrip"):
            fig = Figure("in-memory round trip, c=1", baseline_name="ThreadPoolExecutor(1)")
            fig.target = ">= 1.0x"
            roundtrip_varmq(1000)
            roundtrip_executor(1000)
            for i in range(args.repeat):
                if i % 2:
                    base, value = roundtrip_executor(n_round), roundtrip_varmq(n_round)
                else:
                    value, base = roundtrip_varmq(n_round), roundtrip_executor(n_round)
                fig.values.append(value)
                fig.baselines.append(base)
                fig.loads.append(load1())
            figures.append(fig)
            section("roundtrip")
        if wanted("memory"):
            for which in ("fifo", "priority"):
                fig = Figure(
                    f"memory per queued job, {which}", unit="B/job", baseline_name="SimpleQueue"
                )
                fig.target = f"<= {MEMORY_TARGETS[which]:.0f} B"
                for _ in range(args.repeat):
                    fig.values.append(memory_per_job(which, n_memory))
                    fig.baselines.append(memory_per_job("simple", n_memory))
                    fig.loads.append(load1())
                figures.append(fig)
            section("memory")
    finally:
        if bench._client is not None:
            bench._client.close()
        server.close()
        shutil.rmtree(directory, ignore_errors=True)
    print(f"uptime at end:   {_common.uptime()}")
    print(
        f"jobs: add {n_add:,}, drain {n_drain:,}, pickups {n_pickups}, fair {n_fair:,}, "
        f"round trips {n_round:,}, memory {n_memory:,}"
    )
    print()
    print_table(figures)
    for line in notes:
        print(line)
    return 0


def print_table(figures: list[Figure]) -> None:
    print(
        "| Measure | varmq: median (min-max) | Baseline | Baseline: median (min-max) | "
        "Ratio: median (min-max) | Target | Met | Load 1-min |"
    )
    print("|---|---:|---|---:|---:|---|---|---|")
    for fig in figures:
        ratios = fig.ratios()
        ratio = spread(ratios, ".2f") if ratios else "-"
        met = _judge(fig)
        fmt = ".2f" if fig.unit in ("ms", "share spread", "% CPU") else ",.0f"
        value = spread(fig.values, fmt) + f" {fig.unit}"
        if fig.note:
            value += f"; {fig.note}"
        print(
            f"| {fig.name} | {value} | {fig.baseline_name or '-'} | "
            f"{spread(fig.baselines, fmt) if fig.baselines else '-'} | {ratio} | {fig.target} | "
            f"{met} | {spread(fig.loads, '.2f')} |"
        )


def _judge(fig: Figure) -> str:
    name = fig.name
    if not fig.values:
        return "-"
    mid = statistics.median(fig.values)
    ratio = fig.ratio()
    if name.startswith("add "):
        adapter = name.split()[1].rstrip(",")
        key = ("threads " if f"{THREADS} threads" in name else "add ") + adapter
        return _met(ratio is not None and ratio >= TARGETS[key])
    if name.startswith("drain redisq"):
        return _met(mid >= TARGETS["drain redisq"])
    if name.startswith("drain"):
        return "(report)"
    if name.startswith("pickup"):
        adapter, label = name.split()[1], name.split()[2]
        want = LATENCY_TARGETS[adapter][0 if label == "p50" else 1]
        return _met(mid <= want)
    if name.startswith("fair"):
        return _met(max(fig.values) <= FAIR_TOLERANCE)
    if name.startswith("idle"):
        return _met(mid < IDLE_TARGET)
    if name.startswith("in-memory"):
        return _met(ratio is not None and ratio >= TARGETS["roundtrip"])
    if name.startswith("memory"):
        which = name.rsplit(" ", 1)[1]
        return _met(mid <= MEMORY_TARGETS[which])
    return "-"


if __name__ == "__main__":
    sys.exit(main())
