"""Acceptance: a recurring schedule declared by three consumer processes fires each occurrence once.

Three consumer processes (``tests.acceptance.schedule_actors schedule``) declare the same schedule
``worker.schedule(name, every=1, ...)`` on one queue that keeps job records, on a sqliteq file
and on a redis-server, and run for about five seconds. Every process adds every occurrence
(job id ``name:<occurrence>``); each one must run exactly once, counted from the lines the
three processes log for the jobs they ran.
"""

from __future__ import annotations

import datetime
import signal
import subprocess
import sys
import time
from collections import Counter
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
