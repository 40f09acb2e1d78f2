"""Acceptance: job records across real processes on a redis-server.

A producer process adds 200 jobs with ids to a redisq queue opened with ``keep_results``; two
consumer processes (``varmq.new_result_worker``) run them; a third process, started before any
consumer, waits for every id with ``result_of`` and must get every result. In the second test
one consumer is killed with SIGKILL while it runs jobs: its jobs come back when their leases
expire, the other consumer runs them again, and the waiting process still gets every result,
the rerun's, with the record saying it took more than one attempt.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]
JOBS = 200
DEADLINE = 60.0


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()


def _actor(*args: str, stdout: int | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.acceptance.record_actors", *args],
        cwd=ROOT,
        stdout=stdout,
        text=True,
    )


def _lines(log: Path, kind: str) -> list[str]:
    if not log.exists():
        return []
    return [line.split(" ", 1)[1] for line in log.read_text().splitlines() if line.startswith(kind)]


class Run:
    """The producer, the waiting process and two consumers of one queue."""

    def __init__(self, url: str, tmp: Path, job_seconds: float) -> None:
        self.url, self.queue = url, f"squares-{time.time_ns()}"
        self.logs = [tmp / "consumer-0.log", tmp / "consumer-1.log"]
        self.job_seconds = job_seconds
        self.processes: list[subprocess.Popen[str]] = []
        self.waiter: subprocess.Popen[str] | None = None
        self.consumers: list[subprocess.Popen[str]] = []

    def start(self) -> None:
        producer = _actor("produce", self.url, self.queue, str(JOBS))
        self.processes.append(producer)
        assert producer.wait(timeout=DEADLINE) == 0
        # Waiting before anything runs: every result arrives while the waiter waits.
        self.waiter = _actor("wait", self.url, self.queue, str(JOBS), stdout=subprocess.PIPE)
        self.processes.append(self.waiter)
        for log in self.logs:
            consumer = _actor(
                "consume", self.url, self.queue, str(log), str(self.job_seconds),
                stdout=subprocess.PIPE,
            )  # fmt: skip
            self.processes.append(consumer)
            self.consumers.append(consumer)
        for consumer in self.consumers:
            assert consumer.stdout is not None
            assert consumer.stdout.readline().strip() == "ready", "a consumer did not start"

    def results(self) -> dict[str, dict[str, object]]:
        """What the waiting process printed, once it exits: by job id."""
        assert self.waiter is not None
        out, _ = self.waiter.communicate(timeout=DEADLINE)
        assert self.waiter.returncode == 0, "the waiting process failed"
        return {row["id"]: row for row in map(json.loads, out.splitlines())}

    def stop(self) -> None:
        for consumer in self.consumers:
            if consumer.poll() is None:
                consumer.send_signal(signal.SIGTERM)
                assert consumer.wait(timeout=DEADLINE) == 0, "a consumer did not stop cleanly"

    def close(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def test_a_process_waiting_with_result_of_gets_every_result_of_two_consumers(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    run = Run(redis_server.url, tmp_path, job_seconds=0.005)
    try:
        run.start()
        results = run.results()
        run.stop()
    finally:
        run.close()
    assert sorted(results) == sorted(f"job-{i}" for i in range(JOBS))
    assert all(results[f"job-{i}"]["result"] == {"square": i * i} for i in range(JOBS))
    ran = [_lines(log, "done ") for log in run.logs]
    assert sorted(ran[0] + ran[1]) == sorted(results)  # each job ran once
    print(f"\n{JOBS} results; jobs per consumer: {[len(r) for r in ran]}")


def test_the_waiting_process_gets_every_result_when_a_consumer_is_killed_mid_run(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    run = Run(redis_server.url, tmp_path, job_seconds=0.05)
    try:
        run.start()
        victim, victim_log = run.consumers[0], run.logs[0]
        deadline = time.monotonic() + DEADLINE
        while len(_lines(victim_log, "start ")) < 10:
            assert time.monotonic() < deadline, "the first consumer never ran jobs"
            time.sleep(0.01)
        victim.send_signal(signal.SIGKILL)
        victim.wait(timeout=DEADLINE)
        results = run.results()
        run.stop()
    finally:
        run.close()
    assert sorted(results) == sorted(f"job-{i}" for i in range(JOBS))
    assert all(results[f"job-{i}"]["result"] == {"square": i * i} for i in range(JOBS))
    started = set(_lines(run.logs[0], "start "))
    finished = set(_lines(run.logs[0], "done "))
    cut_off = started - finished  # running when the consumer died: never settled by it
    assert cut_off, "the kill did not land while a job ran"
    rerun = set(_lines(run.logs[1], "done "))
    assert cut_off <= rerun, "a job of the killed consumer was not run again"
    assert all(int(str(results[job_id]["attempts"])) >= 2 for job_id in cut_off)
    print(
        f"\n{JOBS} results; the killed consumer left {len(cut_off)} running jobs, "
        f"rerun by the other (attempts {sorted({results[j]['attempts'] for j in cut_off})})"
    )
