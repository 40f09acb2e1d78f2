"""Acceptance: delays and retries are stored, so they survive a consumer process dying.

A consumer is killed while jobs wait out a delay or a retry back-off; a new consumer process
runs each of them once, and not before its time. Run on sqliteq and redisq.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parents[2]
JOBS = 20
DEADLINE = 30.0


def spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "tests.acceptance.actors", *args], cwd=ROOT)


def lines(log: Path) -> list[list[str]]:
    try:
        return [line.split() for line in log.read_text().splitlines()]
    except FileNotFoundError:
        return []


def wait_for(log: Path, word: str, count: int) -> list[list[str]]:
    deadline = time.monotonic() + DEADLINE
    while True:
        found = [parts for parts in lines(log) if parts and parts[0] == word]
        if len(found) >= count:
            return found
        assert time.monotonic() < deadline, f"only {len(found)} '{word}' lines in {log.name}"
        time.sleep(0.05)


def stop(process: subprocess.Popen[bytes], kill: bool = False) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
    process.wait(timeout=30)


@pytest.fixture(scope="module")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    server.start()
    yield server
    server.close()


@pytest.fixture(params=["sqliteq", "redisq"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqliteq":
        return f"sqlite:{tmp_path / 'jobs.db'}"
    server: RedisServer = request.getfixturevalue("redis_server")
    return server.url


def test_delayed_jobs_run_once_after_their_time_across_a_consumer_restart(
    store: str, tmp_path: Path
) -> None:
    queue = f"delayed-{time.time_ns()}"
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    added = time.time()
    producer = spawn("produce-delayed", store, queue, str(JOBS), "1.5")
    assert producer.wait(timeout=DEADLINE) == 0
    first = spawn("consume", store, queue, str(log_a))
    try:
        wait_for(log_a, "ready", 1)
        assert not [p for p in lines(log_a) if p[0] == "start"], "a delayed job ran early"
    finally:
        stop(first, kill=True)
    second = spawn("consume", store, queue, str(log_b))
    try:
        done = wait_for(log_b, "done", JOBS)
    finally:
        stop(second)
    assert sorted(p[1] for p in done) == sorted(f"job-{i}" for i in range(JOBS))
    assert time.time() - added >= 1.5


def test_retry_back_off_survives_the_consumer_that_failed_the_job(
    store: str, tmp_path: Path
) -> None:
    queue = f"retry-{time.time_ns()}"
    log_a, log_b = tmp_path / "a.log", tmp_path / "b.log"
    first = spawn("consume-retry", store, queue, str(log_a))
    try:
        producer = spawn("produce", store, queue, "0", str(JOBS))
        assert producer.wait(timeout=DEADLINE) == 0
        failed = wait_for(log_a, "fail", JOBS)  # every job failed once and was given back
    finally:
        stop(first, kill=True)
    assert not [p for p in lines(log_a) if p[0] == "done"], "a retry ran before its back-off"
    second = spawn("consume-retry", store, queue, str(log_b))
    try:
        done = wait_for(log_b, "done", JOBS)
    finally:
        stop(second)
    assert sorted(p[1] for p in done) == sorted(p[1] for p in failed)
    assert {p[2] for p in done} == {"2"}, "each job ran its second attempt once"
    failed_at = {p[1]: float(p[3]) for p in failed}
    for _, job, _, at in done:
        assert float(at) >= failed_at[job] + 1.0 - 0.05, f"{job} retried before its back-off"
