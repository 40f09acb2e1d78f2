"""Acceptance: a recurring schedule declared by three consumer processes fires each occurrence once.

Three consumer processes (``tests.acceptance.schedule_actors schedule``) declare the same schedule
``worker.schedule(name, every=1, ...)`` on one queue that keeps job records, on a sqliteq file
and on a redis-server, and run for about five seconds. Every process adds every occurrence
(job id ``name:<occurrence>``); each one must run exactly once, counted from the lines the
three processes log for the jobs they ran.

The second test (``schedule-pruned`` and ``fill`` actors) has the queue keep records an hour
but at most five (``keep_results_limit=5``) while a filler adds 40 other jobs a second, so an
occurrence's record is pruned a fraction of a second after it ran: what keeps the occurrence
from being added again is the schedule's mark. Consumers declare an ``every=2`` schedule
half-way between two occurrences (a second starts later, a third is SIGKILLed and restarted),
so each declaration fires an occurrence that already ran and whose record is gone.
"""

from __future__ import annotations

import datetime
import math
import os
import select
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
CONSUMERS = 3
OCCURRENCES = 6  # the one due at start, then one a second: about five seconds
DEADLINE = 30.0


@pytest.fixture(params=["sqliteq", "redisq"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A ``STORE`` argument of the actors: a sqliteq file, or a redis-server of the test's own."""
    if request.param == "sqliteq":
        yield f"sqlite:{tmp_path / 'jobs.db'}"
        return
    server = RedisServer()
    server.start()
    try:
        yield server.url
    finally:
        server.close()


def _runs(logs: list[Path]) -> list[tuple[str, str]]:
    """``(job id, pid)`` of every job the consumers ran, from their logs."""
    runs = []
    for log in logs:
        if log.exists():
            for line in log.read_text().splitlines():
                _, job_id, pid = line.split(" ")
                runs.append((job_id, pid))
    return runs


def _second(job_id: str, name: str) -> int:
    """The occurrence of ``job_id`` (``name:2025-06-01T10:05:00Z``) in Unix seconds."""
    stamp = job_id.removeprefix(f"{name}:")
    when = datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")
    return int(when.replace(tzinfo=datetime.timezone.utc).timestamp())


def test_three_processes_declaring_one_schedule_run_each_occurrence_once(
    store: str, tmp_path: Path
) -> None:
    name, queue = "tick", f"ticks-{time.time_ns()}"
    logs = [tmp_path / f"consumer-{i}.log" for i in range(CONSUMERS)]
    command = [sys.executable, "-m", "tests.acceptance.schedule_actors", "schedule", store, queue]
    processes = [
        subprocess.Popen(
            [*command, name, str(log)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            text=True,
        )
        for log in logs
    ]
    try:
        for process in processes:
            assert process.stdout is not None
            assert process.stdout.readline().strip() == "ready", "a consumer did not start"
        deadline = time.monotonic() + DEADLINE
        while len({job_id for job_id, _ in _runs(logs)}) < OCCURRENCES:
            assert time.monotonic() < deadline, f"only {_runs(logs)} ran"
            time.sleep(0.1)
        for process in processes:
            process.send_signal(signal.SIGTERM)
        for process in processes:
            assert process.wait(timeout=DEADLINE) == 0, "a consumer did not stop cleanly"
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    runs = _runs(logs)
    counts = Counter(job_id for job_id, _ in runs)
    assert len(counts) >= OCCURRENCES
    twice = {job_id: n for job_id, n in counts.items() if n > 1}
    assert not twice, f"occurrences that ran more than once: {twice}"
    seconds = sorted(_second(job_id, name) for job_id in counts)
    assert seconds == list(range(seconds[0], seconds[0] + len(seconds))), (
        f"an occurrence was skipped: {sorted(counts)}"
    )
    by_process = sorted(Counter(pid for _, pid in runs).values())
    print(f"\n{len(counts)} occurrences, each once; runs per process: {by_process}")


PERIOD = 2.0  # every= of the schedule whose records are pruned
FILL_RATE = 40.0  # other jobs added a second: 5 of them ending prune an occurrence's record
MIN_PRUNED_OCCURRENCES = 4
STEP = 15.0  # deadline of one process starting or stopping


def _wait_ready(process: subprocess.Popen[str], what: str) -> None:
    """Wait (at most :data:`STEP`) for ``process`` to print ``ready``."""
    assert process.stdout is not None
    readable, _, _ = select.select([process.stdout], [], [], STEP)
    assert readable, f"{what} did not start within {STEP} s"
    assert process.stdout.readline().strip() == "ready", f"{what} did not start"


def _sleep_until(when: float) -> None:
    time.sleep(max(0.0, when - time.time()))


def _declared(log: Path) -> int:
    """How many times the consumer logging to ``log`` declared the schedule."""
    if not log.exists():
        return 0
    return sum(line.startswith("declared ") for line in log.read_text().splitlines())


def _wait_declared(log: Path, what: str) -> None:
    """Wait (at most :data:`STEP`) for the consumer logging to ``log`` to declare."""
    deadline = time.monotonic() + STEP
    while not _declared(log):
        assert time.monotonic() < deadline, f"{what} did not declare the schedule"
        time.sleep(0.05)


def _pruned_runs(logs: dict[str, Path]) -> dict[str, list[tuple[str, str, int]]]:
    """``job id -> [(consumer, pid, attempt), ...]`` of every job the consumers ran."""
    runs: dict[str, list[tuple[str, str, int]]] = defaultdict(list)
    for label, log in logs.items():
        if log.exists():
            for line in log.read_text().splitlines():
                if line.startswith("run "):
                    _, job_id, pid, attempt = line.split(" ")
                    runs[job_id].append((label, pid, int(attempt)))
    return runs


def test_an_occurrence_whose_record_was_pruned_by_count_runs_once(
    store: str, tmp_path: Path
) -> None:
    name, queue = "pruned", f"pruned-{time.time_ns()}"
    actor = [sys.executable, "-m", "tests.acceptance.schedule_actors"]
    # The actors import this checkout's varmq and adapters, whatever the venv has installed.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "adapters")])}
    fill_log = tmp_path / "fill.log"
    # a: declares at once; c1: half-way through a period, SIGKILLed two periods later and
    # restarted as c2, which declares one period after that; b: one period after c1.
    logs = {label: tmp_path / f"consumer-{label}.log" for label in ("a", "b", "c1", "c2")}
    processes: dict[str, subprocess.Popen[str]] = {}

    def start(label: str, *args: object) -> subprocess.Popen[str]:
        processes[label] = subprocess.Popen(
            [*actor, *map(str, args)], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
        )
        return processes[label]

    def consumer(label: str, at: float) -> subprocess.Popen[str]:
        return start(label, "schedule-pruned", store, queue, name, PERIOD, at, logs[label])

    began = time.monotonic()
    try:
        start("fill", "fill", store, queue, name, PERIOD, FILL_RATE, fill_log)
        consumer("a", 0.0)
        _wait_ready(processes["fill"], "the filler")
        _wait_ready(processes["a"], "consumer a")
        now = time.time()
        middle = math.floor(now / PERIOD) * PERIOD + PERIOD / 2  # half-way: long pruned
        while middle < now + 1.0:
            middle += PERIOD
        consumer("c1", middle)
        consumer("b", middle + PERIOD)
        _wait_ready(processes["c1"], "consumer c1")
        _wait_ready(processes["b"], "consumer b")
        _sleep_until(middle + 2 * PERIOD)
        _wait_declared(logs["c1"], "consumer c1")
        processes["c1"].kill()  # SIGKILL, half-way between two occurrences
        processes["c1"].wait(timeout=STEP)
        consumer("c2", middle + 3 * PERIOD)
        _wait_ready(processes["c2"], "consumer c2")
        _sleep_until(middle + 5 * PERIOD - 0.5)  # just after the sixth occurrence from c1's
        for label in ("a", "b", "c2"):
            _wait_declared(logs[label], f"consumer {label}")
        for label, process in processes.items():
            if label != "c1":
                process.send_signal(signal.SIGTERM)
        for label, process in processes.items():
            if label != "c1":
                assert process.wait(timeout=STEP) == 0, f"{label} did not stop cleanly"
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.kill()
                process.wait()
    elapsed = time.monotonic() - began

    runs = _pruned_runs(logs)
    occurrences = {job_id: ran for job_id, ran in runs.items() if job_id.startswith(f"{name}:")}
    declared = {label: _declared(log) for label, log in logs.items()}
    assert declared == {"a": 1, "b": 1, "c1": 1, "c2": 1}, f"declarations: {declared}"
    twice = {}
    for job_id, ran in occurrences.items():
        first = [run for run in ran if run[2] == 1]
        # A job the killed consumer had started and not acknowledged comes back (attempt 2):
        # a redelivery, not a second add.
        redelivered = len(first) == 1 and first[0][0] == "c1"
        if len(first) != 1 or (len(ran) > 1 and not redelivered):
            twice[job_id] = ran
    assert not twice, f"occurrences run more than once, (consumer, pid, attempt): {twice}"
    assert len(occurrences) >= MIN_PRUNED_OCCURRENCES, f"only {sorted(occurrences)} ran"

    fill_lines = fill_log.read_text().splitlines()
    (filled,) = [int(line.split(" ")[1]) for line in fill_lines if line.startswith("filled ")]
    probes = dict(line.split(" ")[1:] for line in fill_lines if line.startswith("probe "))
    probed = {job_id: probes[job_id] for job_id in occurrences if job_id in probes}
    pruned = [job_id for job_id, state in probed.items() if state == "none"]
    # The filler read each occurrence's record 0.9 s after its time: by then it was pruned.
    assert pruned and len(pruned) * 2 >= len(probed), f"records 0.9 s after: {probed}"
    fills_run = sum(job_id.startswith("fill-") for job_id in runs)
    by = {
        job_id.removeprefix(f"{name}:"): [run[0] for run in ran]
        for job_id, ran in occurrences.items()
    }
    print(
        f"\n{len(occurrences)} occurrences, each once (run by: {dict(sorted(by.items()))}); "
        f"{filled} jobs filled, {fills_run} run; records pruned 0.9 s after their occurrence: "
        f"{len(pruned)}/{len(probed)}; {elapsed:.1f} s"
    )
