"""Acceptance: real producer and consumer processes share one store; some are killed.

Every job id is counted. Without crashes each job runs exactly once. With consumers killed by
SIGKILL in the middle of jobs, each job still completes at least once, and a job runs twice
only if a killed consumer had started it. Run on sqliteq (one file) and on redisq (a real
redis-server of this test module's own, with AOF so it can also be restarted mid-run).
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer

# Each test runs six processes through 10,000 jobs; on a loaded 2-CPU machine that can take
# minutes, and a stalled run should fail on the deadline below with a count, not on a timeout.
pytestmark = pytest.mark.timeout(400)

ROOT = Path(__file__).resolve().parents[2]
JOBS = 10_000
PRODUCERS = 2
CONSUMERS = 4
DEADLINE = 240.0


@dataclass
class Consumer:
    process: subprocess.Popen[bytes]
    log: Path
    killed: bool = False


@dataclass
class Run:
    """The processes of one acceptance run and what their logs say."""

    store: str
    queue: str
    tmp: Path
    consumers: list[Consumer] = field(default_factory=list)
    producers: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def _spawn(self, *args: str) -> subprocess.Popen[bytes]:
        return subprocess.Popen([sys.executable, "-m", "tests.acceptance.actors", *args], cwd=ROOT)

    def start_consumer(self) -> Consumer:
        log = self.tmp / f"consumer-{len(self.consumers)}.log"
        consumer = Consumer(self._spawn("consume", self.store, self.queue, str(log)), log)
        self.consumers.append(consumer)
        return consumer

    def start_producers(self, total: int, producers: int) -> None:
        share = total // producers
        for p in range(producers):
            self.producers.append(
                self._spawn("produce", self.store, self.queue, str(p * share), str(share))
            )

    def lines(self, consumer: Consumer) -> list[str]:
        try:
            return consumer.log.read_text().splitlines()
        except FileNotFoundError:
            return []

    def done(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for consumer in self.consumers:
            counts.update(line[5:] for line in self.lines(consumer) if line.startswith("done "))
        return counts

    def started_by_killed(self) -> set[str]:
        return {
            line[6:]
            for consumer in self.consumers
            if consumer.killed
            for line in self.lines(consumer)
            if line.startswith("start ")
        }

    def kill(self, consumer: Consumer) -> None:
        consumer.process.send_signal(signal.SIGKILL)
        consumer.process.wait()
        consumer.killed = True

    def wait_until_every_job_done(self, expected: set[str]) -> None:
        deadline = time.monotonic() + DEADLINE
        while not expected <= set(self.done()):
            assert time.monotonic() < deadline, (
                f"only {len(set(self.done()) & expected)} of {len(expected)} jobs completed"
            )
            time.sleep(0.2)

    def close(self) -> None:
        for producer in self.producers:
            producer.wait(timeout=DEADLINE)
            assert producer.returncode == 0
        for consumer in self.consumers:
            if consumer.process.poll() is None:
                consumer.process.send_signal(signal.SIGTERM)
        for consumer in self.consumers:
            consumer.process.wait(timeout=30)
            if not consumer.killed:
                assert consumer.process.returncode == 0, "a consumer did not stop cleanly"


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(appendonly=True)
    server.start()
    yield server
    server.close()


@pytest.fixture(params=["sqliteq", "redisq"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqliteq":
        return f"sqlite:{tmp_path / 'jobs.db'}"
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


@pytest.fixture
def run(store: str, tmp_path: Path) -> Iterator[Run]:
    made = Run(store, f"acceptance-{time.time_ns()}", tmp_path)
    try:
        yield made
    finally:
        for process in [c.process for c in made.consumers] + made.producers:
            if process.poll() is None:
                process.kill()
                process.wait()


def expected_ids() -> set[str]:
    return {f"job-{i}" for i in range(JOBS)}


def test_every_job_runs_exactly_once_across_consumer_processes(run: Run) -> None:
    for _ in range(CONSUMERS):
        run.start_consumer()
    run.start_producers(JOBS, PRODUCERS)
    run.wait_until_every_job_done(expected_ids())
    run.close()
    done = run.done()
    assert set(done) == expected_ids()
    twice = [job for job, n in done.items() if n > 1]
    assert twice == [], f"{len(twice)} jobs ran twice without any crash"
    per_consumer = [
        sum(1 for line in run.lines(c) if line.startswith("done ")) for c in run.consumers
    ]
    print(f"\n{JOBS} jobs, each once; per consumer: {per_consumer}")


def test_jobs_of_killed_consumers_complete_elsewhere_and_only_they_run_twice(run: Run) -> None:
    rng = random.Random(7)
    for _ in range(CONSUMERS):
        run.start_consumer()
    run.start_producers(JOBS, PRODUCERS)
    kills = 0
    for threshold in (JOBS // 10, 3 * JOBS // 10, JOBS // 2, 7 * JOBS // 10):
        deadline = time.monotonic() + DEADLINE
        while sum(run.done().values()) < threshold:
            assert time.monotonic() < deadline, "the consumers stopped making progress"
            time.sleep(0.05)
        live = [c for c in run.consumers if not c.killed]
        run.kill(rng.choice(live))
        kills += 1
        run.start_consumer()
    run.wait_until_every_job_done(expected_ids())
    run.close()
    done = run.done()
    assert set(done) == expected_ids(), "jobs were lost"
    twice = {job for job, n in done.items() if n > 1}
    assert twice <= run.started_by_killed(), "a job ran twice although no consumer running it died"
    print(
        f"\n{kills} consumers killed with SIGKILL mid-run; {JOBS} jobs all completed; "
        f"{len(twice)} ran twice (all started by a killed consumer)"
    )


def test_redis_restarted_mid_run_loses_no_job(redis_server: RedisServer, tmp_path: Path) -> None:
    made = Run(redis_server.url, f"restart-{time.time_ns()}", tmp_path)
    try:
        for _ in range(CONSUMERS):
            made.start_consumer()
        made.start_producers(JOBS, PRODUCERS)
        deadline = time.monotonic() + DEADLINE
        while sum(made.done().values()) < JOBS // 3:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        redis_server.restart()  # AOF on: stored jobs and leases survive the restart
        made.wait_until_every_job_done(expected_ids())
        made.close()
    finally:
        for process in [c.process for c in made.consumers] + made.producers:
            if process.poll() is None:
                process.kill()
                process.wait()
    done = made.done()
    assert set(done) == expected_ids()
    twice = [job for job, n in done.items() if n > 1]
    print(f"\nRedis restarted mid-run: {JOBS} jobs all completed, {len(twice)} ran twice")
