"""Acceptance: a Redis that freezes or restarts in the middle of a long job, with real processes.

Two consumer processes (``actors consume-slow``) share one distributed queue on a redis-server
of this module's own (AOF on, so a restart keeps jobs and leases). One job runs 8 s under a
3 s visibility timeout, so the lease is renewed about every second. Shortly after a renewal,
Redis is frozen (SIGSTOP) for 1.7 s, or stopped and started again, while the job runs. The
job must run exactly once (counted by job id in the consumers' logs), the consumer running it
must have logged the outage, and the idle consumer must have reported it on ``errs()``
(``FailedToDequeueError``). Then: a producer's add while Redis is frozen raises within the
documented bound.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import redisq
import varmq
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
JOB_SECONDS = 8.0
LEASE = 3.0
OUTAGE_SECONDS = 1.7
# Renewals come every LEASE / 3 = 1 s after the take; the outage starts 0.4 s after the third,
# so the lease has 2.6 s left: enough for the outage and the first renewal after it.
OUTAGE_AFTER_START = 3.4
WAIT = 30.0  # seconds: the longest wait for a consumer process to log something
BOUND = (1 + redisq.DEFAULT_RETRIES) * (
    redisq.DEFAULT_CONNECT_TIMEOUT + redisq.DEFAULT_SOCKET_TIMEOUT
) + 0.25  # docs/redisq.md, "Errors and timeouts"


@pytest.fixture(scope="module")
def server() -> Iterator[RedisServer]:
    made = RedisServer(appendonly=True)
    made.start()
    try:
        yield made
    finally:
        made.close()


class Consumers:
    """The consumer processes of one test and their logs."""

    def __init__(self, url: str, queue: str, tmp: Path) -> None:
        self.logs = [tmp / f"consumer-{i}.log" for i in range(2)]
        actor = [sys.executable, "-m", "tests.acceptance.actors", "consume-slow", url, queue]
        self.processes = [
            subprocess.Popen([*actor, str(log), str(JOB_SECONDS), str(LEASE)], cwd=ROOT)
            for log in self.logs
        ]

    def lines(self, i: int) -> list[str]:
        return self.logs[i].read_text().splitlines() if self.logs[i].exists() else []

    def wait_for(self, what: str, predicate: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT
        while not predicate():
            assert time.monotonic() < deadline, f"no {what} within {WAIT} s"
            assert all(p.poll() is None for p in self.processes), "a consumer exited"
            time.sleep(0.02)  # polling other processes' log files; nothing to wait on

    def runner(self, job_id: str) -> int:
        """Which consumer logged ``start <job_id>`` first (waits for it)."""
        self.wait_for("start", lambda: any(f"start {job_id}" in self.lines(i) for i in (0, 1)))
        return next(i for i in (0, 1) if f"start {job_id}" in self.lines(i))

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            assert process.wait(timeout=WAIT) == 0, "a consumer did not stop cleanly"

    def kill(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def _count(consumers: Consumers, word: str, job_id: str) -> int:
    return sum(consumers.lines(i).count(f"{word} {job_id}") for i in (0, 1))


@pytest.mark.parametrize("outage", ["frozen", "restarted"])
def test_a_long_job_runs_exactly_once_through_a_redis_outage_and_the_outage_is_reported(
    server: RedisServer, tmp_path: Path, outage: str
) -> None:
    name = f"slow-{outage}-{time.time_ns()}"
    consumers = Consumers(server.url, name, tmp_path)
    try:
        consumers.wait_for("ready", lambda: all("ready" in consumers.lines(i) for i in (0, 1)))
        with redisq.new(server.url) as queues:
            handle = varmq.new_distributed_queue(queues.new_distributed_queue(name))
            assert handle.add({"n": 1}, job_id="long-job")
            runner = consumers.runner("long-job")
            started = time.monotonic()
            time.sleep(max(0.0, started + OUTAGE_AFTER_START - time.monotonic()))  # the timing
            if outage == "frozen":
                server.freeze()
                time.sleep(OUTAGE_SECONDS)  # how long Redis stays frozen
                server.thaw()
            else:
                server.stop()
                time.sleep(OUTAGE_SECONDS - 0.3)  # down; starting it takes a few 100 ms more
                server.start()
            resumed = time.monotonic() - started
            consumers.wait_for("done", lambda: _count(consumers, "done", "long-job") >= 1)
            stats = queues.new_distributed_queue(name).stats()
        consumers.stop()
    finally:
        consumers.kill()
    assert resumed < JOB_SECONDS, "the outage did not end in the middle of the job"
    assert (_count(consumers, "start", "long-job"), _count(consumers, "done", "long-job")) == (1, 1)
    assert (stats["waiting"], stats["in_flight"], stats["delayed"]) == (0, 0, 0)  # acknowledged
    ran, idle = consumers.lines(runner), consumers.lines(1 - runner)
    assert any(line.startswith("log WARNING") and "unreachable" in line for line in ran), ran
    assert any(line.startswith("err FailedToDequeueError") for line in idle), idle
    assert not any(line.startswith("err LeaseLostError") for line in ran + idle)
    print(
        f"\nRedis {outage} for ~{OUTAGE_SECONDS} s, {OUTAGE_AFTER_START} s into an "
        f"{JOB_SECONDS:g} s job with a {LEASE:g} s lease: ran once; idle consumer reported "
        f"{sum(line.startswith('err ') for line in idle)} error(s)"
    )


def test_an_add_while_redis_is_frozen_raises_within_the_bound(server: RedisServer) -> None:
    with redisq.new(server.url) as queues:
        q = queues.new_distributed_queue(f"frozen-add-{time.time_ns()}")
        handle = varmq.new_distributed_queue(q)
        assert handle.add({"n": 0})
        server.freeze()
        try:
            started = time.monotonic()
            with pytest.raises(redisq.RedisUnavailableError, match="enqueue on queue"):
                q.enqueue(b"payload")
            raw = time.monotonic() - started
            started = time.monotonic()
            with pytest.raises(varmq.EnqueueError) as strict:
                handle.add({"n": 1}, strict=True)
            through_handle = time.monotonic() - started
        finally:
            server.thaw()
    assert isinstance(strict.value.__cause__, redisq.RedisUnavailableError)
    assert raw < BOUND + 3.0 and through_handle < BOUND + 3.0  # generous: a loaded machine
    print(
        f"\nadd with Redis frozen raised after {raw:.2f} s (handle, strict: {through_handle:.2f} s)"
    )
