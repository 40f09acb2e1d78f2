"""Acceptance: ``varmq worker`` as a service process, stopped by SIGTERM in the middle of a run.

Two service processes consume one queue of 500 jobs of 50 ms (sqliteq, and redisq on the test
session's redis-server). The first is sent SIGTERM once it has finished 60 jobs. It must exit 0
within its grace, hand the jobs it had taken but not started back to storage, and the second
process must start those at once: the visibility timeout is 60 s, so a job that reached the
second process within a second of the first one's exit was handed back, not left to expire.
Every job id is counted: each one done exactly once across the two processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import varmq
from tests.acceptance.actors import open_store

pytestmark = pytest.mark.timeout(180)

ROOT = Path(__file__).resolve().parents[2]
JOBS = 500
STOP_AFTER = 60
GRACE = 10.0
DEADLINE = 90.0


@pytest.fixture(params=["sqliteq", "redisq"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqliteq":
        yield f"sqlite:{tmp_path / 'jobs.db'}"
    else:
        yield request.getfixturevalue("redis_url")


def _lines(log: Path) -> list[tuple[float, str, str]]:
    """``(wall time, "start"|"done"|"ready", job id)`` of each whole line of ``log``."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 3:
            out.append((float(parts[0]), parts[1], parts[2]))
        elif len(parts) == 2:
            out.append((float(parts[0]), parts[1], ""))
    return out


def _wait_for(predicate: object, what: str, timeout: float = DEADLINE) -> None:
    assert callable(predicate)
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)  # polling another process's log file: there is nothing to wait on


def _filled(store: str, prefix: str, jobs: int) -> str:
    """A fresh queue in ``store`` holding ``jobs`` jobs, ``job-000`` onwards; its name."""
    queue = f"{prefix}-{os.getpid()}-{time.monotonic_ns()}"
    queues = open_store(store)
    handle = varmq.new_distributed_queue(queues.new_distributed_queue(queue))
    for i in range(jobs):
        assert handle.add({"n": i}, job_id=f"job-{i:03d}")
    queues.close()
    return queue


def _drain_then_stop(second: subprocess.Popen[str], logs: tuple[Path, Path], jobs: int) -> None:
    """Wait until the two logs hold every one of ``jobs`` as done; stop ``second``, cleanly."""

    def all_done() -> bool:
        done = [i for _, k, i in _lines(logs[0]) + _lines(logs[1]) if k == "done"]
        return len(set(done)) >= jobs

    _wait_for(all_done, f"all {jobs} jobs to be done")
    second.send_signal(signal.SIGTERM)
    _, second_err = second.communicate(timeout=GRACE + 30)
    assert second.returncode == 0, second_err


def _service(
    store: str, queue: str, log: Path, target: str = "worker", job_seconds: float = 0.05
) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "SERVICE_STORE": store,
        "SERVICE_QUEUE": queue,
        "SERVICE_LOG": str(log),
        "SERVICE_JOB_SECONDS": str(job_seconds),
    }
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "varmq",
            "worker",
            f"tests.acceptance.service_app:{target}",
            "--grace",
            str(GRACE),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_sigterm_mid_run_exits_0_and_hands_taken_jobs_to_the_other_consumer(
    store: str, tmp_path: Path
) -> None:
    queue = _filled(store, "service", JOBS)

    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = _service(store, queue, first_log)
    second = _service(store, queue, second_log)
    try:
        _wait_for(
            lambda: sum(kind == "done" for _, kind, _ in _lines(first_log)) >= STOP_AFTER,
            f"the first service to finish {STOP_AFTER} jobs",
        )
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=GRACE + 30)
        exited_at = time.time()
        assert first.returncode == 0, err
        assert "after SIGTERM" in err and "0 still running" in err, err

        _drain_then_stop(second, (first_log, second_log), JOBS)
    finally:
        for process in (first, second):
            process.kill()
            process.wait()

    handed_back = int(err.split(" taken jobs handed back")[0].rsplit(", ", 1)[-1])
    assert handed_back > 0, f"the first service held no taken-but-unstarted job: {err}"

    firsts, seconds = _lines(first_log), _lines(second_log)
    done = [i for _, k, i in firsts + seconds if k == "done"]
    twice = sorted(i for i in set(done) if done.count(i) > 1)
    assert twice == [], f"{len(twice)} jobs ran twice: {twice[:10]}"
    assert sorted(set(done)) == [f"job-{i:03d}" for i in range(JOBS)]

    # The jobs the first service had taken ahead of a slot are the ones it never started but
    # whose ids come before the last one it started (each take hands out the oldest jobs).
    started_by_first = {i for _, k, i in firsts if k == "start"}
    last_first = max(started_by_first)
    second_starts = {i: t for t, k, i in seconds if k == "start"}
    behind = [i for i in second_starts if i < last_first and i not in started_by_first]
    late = {
        i: round(second_starts[i] - exited_at, 3)
        for i in behind
        if second_starts[i] > exited_at + 1.0
    }
    assert late == {}, f"handed-back jobs the other consumer started more than 1 s later: {late}"


def test_two_workers_closing_their_shared_store_on_shutdown_run_no_job_twice(
    store: str, tmp_path: Path
) -> None:
    """Two workers of one ``varmq worker`` share a store and each closes it in ``on_shutdown``
    (docs/deploy.md's set-up). On SIGTERM the idle one stops at once; the store must stay open
    until the busy one's running jobs are acknowledged, or they run again: then the summary and
    the exit status must say so. A second process drains the rest; every job id is counted."""
    jobs = 80
    queue = _filled(store, "service2", jobs)

    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    first = _service(store, queue, first_log, target="two_workers", job_seconds=0.4)
    second: subprocess.Popen[str] | None = None
    try:
        # Mid-job: 4 jobs of 0.4 s are running when SIGTERM arrives.
        _wait_for(
            lambda: sum(kind == "start" for _, kind, _ in _lines(first_log)) >= 10,
            "the first service to start 10 jobs",
        )
        first.send_signal(signal.SIGTERM)
        _, err = first.communicate(timeout=GRACE + 30)
        assert "after SIGTERM" in err, err
        summary = err.split("varmq: stopped 2 workers", 1)[1].splitlines()[0]
        unacknowledged = int(summary.split(" not acknowledged")[0].rsplit(", ", 1)[-1])
        second = _service(store, queue, second_log)

        _drain_then_stop(second, (first_log, second_log), jobs)
    finally:
        for process in (first, second):
            if process is not None:
                process.kill()
                process.wait()
    done = [i for _, k, i in _lines(first_log) + _lines(second_log) if k == "done"]
    twice = sorted(i for i in set(done) if done.count(i) > 1)
    assert sorted(set(done)) == [f"job-{i:03d}" for i in range(jobs)]
    # A done job whose acknowledgement failed is still leased: it would run again (after the
    # 60 s lease) on top of those that already ran twice.
    queues = open_store(store)
    try:
        left = queues.new_distributed_queue(queue).stats()
    finally:
        queues.close()
    again = len(twice) + left["in_flight"] + left["waiting"]
    # None ran twice unless the summary and the exit status said so.
    assert again <= unacknowledged, (twice, left, summary)
    assert (first.returncode == 0) == (unacknowledged == 0), (first.returncode, summary)
    assert (twice, left["in_flight"]) == ([], 0), f"jobs to run twice: {twice}, {left}; {summary}"
    assert first.returncode == 0, err
