"""Acceptance: ``hard_timeout`` ends a ``varmq worker`` process whose job function ignores its
timeout (tests/acceptance/hard_timeout_app.py).

The first service process takes a slow but well-behaved job, a job stuck in ``time.sleep(60)``
(or in ``threading.Event().wait()``, a C call) with a 0.2 s timeout, and quick jobs, under
``hard_timeout=0.5``. It must exit with status 4 within a few seconds of the stuck job's start,
with one ERROR line naming the overrun; the stuck job must be settled as timed out by its retry
policy (dead-lettered after its one attempt, or retried); the slow job, running when the process
ended, must be handed back at once: a second service process starts it within seconds although
its lease is 60 s, as its second attempt. Every job id is counted: none is lost.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

import varmq
from tests.acceptance.actors import open_store
from tests.acceptance.process_tools import ROOT, STORES, store_url

pytestmark = pytest.mark.timeout(60)

QUICK = 20
EXIT_WITHIN = 5.0  # seconds from the stuck job's start: the limit is 0.2 + 0.5 s
PROMPTLY = 5.0  # seconds from the first process's end to the slow job's second start (lease 60)
DEADLINE = 20.0


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request, tmp_path)


def _lines(log: Path) -> list[tuple[float, str, str, int]]:
    """``(wall time, "start"|"done", job id, attempt)`` of each job line of ``log``."""
    if not log.exists():
        return []
    out = []
    for line in log.read_text().splitlines():
        parts = line.split()
        if len(parts) == 4:
            out.append((float(parts[0]), parts[1], parts[2], int(parts[3])))
    return out


def _wait_for(predicate: Any, what: str, timeout: float = DEADLINE) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)  # polling another process's log file: there is nothing to wait on


def _filled(store: str) -> tuple[str, list[str]]:
    """A fresh queue holding ``slow-1``, ``stuck`` (timeout 0.2 s) and the quick jobs, in that
    order (the first take has the first two); its name and every job id."""
    queue = f"hard-{os.getpid()}-{time.monotonic_ns()}"
    queues = open_store(store)
    handle = varmq.new_distributed_queue(queues.new_distributed_queue(queue, keep_results=600))
    ids = ["slow-1", "stuck", *(f"quick-{i:02d}" for i in range(QUICK))]
    for job_id in ids:
        assert handle.add(job_id, job_id=job_id, timeout=0.2 if job_id == "stuck" else None)
    queues.close()
    return queue, ids


def _service(store: str, queue: str, log: Path, stuck: str, attempts: int) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "SERVICE_STORE": store,
        "SERVICE_QUEUE": queue,
        "SERVICE_LOG": str(log),
        "HARD_STUCK": stuck,
        "HARD_ATTEMPTS": str(attempts),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "varmq", "worker", "tests.acceptance.hard_timeout_app:worker"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def _record(store: str, queue: str, job_id: str) -> Any:
    queues = open_store(store)
    try:
        handle = varmq.new_distributed_queue(queues.new_distributed_queue(queue, keep_results=600))
        return handle.job(job_id)
    finally:
        queues.close()


def _dead_letters(store: str, queue: str) -> list[Any]:
    queues = open_store(store)
    try:
        return list(queues.new_distributed_queue(queue).dead_letters(10))
    finally:
        queues.close()


def _run(
    store: str, tmp_path: Path, stuck: str, attempts: int, processes: list[subprocess.Popen[str]]
) -> tuple[str, list[str], float, str]:
    """Run the first service to its hard end, check its exit; the queue, the ids, when it
    ended and its stderr."""
    queue, ids = _filled(store)
    first = _service(store, queue, tmp_path / "first.log", stuck, attempts)
    processes.append(first)
    _, err = first.communicate(timeout=DEADLINE)
    ended = time.time()
    assert first.returncode == 4, err
    firsts = _lines(tmp_path / "first.log")
    [stuck_start] = [t for t, kind, i, _ in firsts if kind == "start" and i == "stuck"]
    assert ended - stuck_start < EXIT_WITHIN, (ended - stuck_start, err)
    errors = [line for line in err.splitlines() if " ERROR " in line]
    assert len(errors) == 1, err
    assert "ending this process: a job function ran" in errors[0], errors[0]
    assert "past its timeout, beyond hard_timeout=0.5" in errors[0], errors[0]
    assert "worker hard, job 'stuck' of queue" in errors[0], errors[0]
    assert "timeout 0.2 s" in errors[0], errors[0]
    assert "Traceback" not in err, err
    # The slow job was running when the process ended, and was handed back.
    assert ("start", "slow-1", 1) in [(k, i, a) for _, k, i, a in firsts], firsts
    assert ("done", "slow-1", 1) not in [(k, i, a) for _, k, i, a in firsts], firsts
    handed = re.search(r"(\d+) running jobs? handed back to storage", err)
    assert handed is not None and int(handed.group(1)) >= 1, err
    return queue, ids, ended, err


def _drain(
    store: str,
    queue: str,
    tmp_path: Path,
    wanted: set[str],
    attempts: int,
    processes: list[subprocess.Popen[str]],
) -> list[tuple[float, str, str, int]]:
    """A second service until every id of ``wanted`` is done (in either log); its lines."""
    second_log = tmp_path / "second.log"
    second = _service(store, queue, second_log, "sleep", attempts)
    processes.append(second)

    def done() -> set[str]:
        lines = _lines(tmp_path / "first.log") + _lines(second_log)
        return {i for _, k, i, _ in lines if k == "done"}

    _wait_for(lambda: wanted <= done(), f"{sorted(wanted - done())} to be done")
    second.send_signal(signal.SIGTERM)
    _, err = second.communicate(timeout=DEADLINE)
    assert second.returncode == 0, err
    return _lines(second_log)


def _check_counts(
    tmp_path: Path, ids: list[str], seconds: list[tuple[float, str, str, int]], stuck_done: bool
) -> None:
    """No job lost; a job done twice was one the first process was running when it ended."""
    firsts = _lines(tmp_path / "first.log")
    done = [i for _, k, i, _ in firsts + seconds if k == "done"]
    expected = set(ids) if stuck_done else set(ids) - {"stuck"}
    assert set(done) == expected, sorted(expected ^ set(done))
    # A job may run twice only if it was running when the first process ended (a quick job
    # whose function returned while the process was ending: handed back all the same, so it
    # runs again, as it would after its lease); never one finished before the limit passed.
    [stuck_start] = [t for t, k, i, _ in firsts if k == "start" and i == "stuck"]
    limit_at = stuck_start + 0.2 + 0.5
    first_done = {i: t for t, k, i, _ in firsts if k == "done"}
    twice = {i for i in done if done.count(i) > 1}
    early = {i: round(limit_at - first_done[i], 3) for i in twice if first_done[i] < limit_at}
    assert early == {}, f"jobs done before the limit passed ran again: {early}"


@pytest.mark.parametrize("stuck", ["sleep", "wait"])
def test_a_stuck_job_past_hard_timeout_ends_the_process_with_status_4_and_is_dead_lettered(
    store: str, stuck: str, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    queue, ids, ended, _ = _run(store, tmp_path, stuck, 1, processes)

    # One attempt allowed: the stuck job was dead-lettered as timed out, at its timeout.
    record = _record(store, queue, "stuck")
    assert record is not None and record.state == "dead", record
    assert record.error is not None and record.error.type == "JobTimeoutError", record
    assert record.attempts == 1, record
    [dead] = _dead_letters(store, queue)
    assert "JobTimeoutError" in dead["error"], dead

    seconds = _drain(store, queue, tmp_path, set(ids) - {"stuck"}, 1, processes)
    [(again_at, attempt)] = [(t, a) for t, k, i, a in seconds if k == "start" and i == "slow-1"]
    assert attempt == 2  # the interrupted run counted
    assert again_at - ended < PROMPTLY, again_at - ended  # handed back, not left to its lease
    slow = _record(store, queue, "slow-1")
    assert slow is not None and slow.state == "succeeded" and slow.attempts == 2, slow
    _check_counts(tmp_path, ids, seconds, stuck_done=False)


def test_a_stuck_job_past_hard_timeout_is_retried_by_its_policy(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    store = f"sqlite:{tmp_path / 'jobs.db'}"
    queue, ids, ended, _ = _run(store, tmp_path, "wait", 2, processes)

    # Two attempts allowed: the stuck job's timeout was retried (0.2 s back-off), not lost.
    record = _record(store, queue, "stuck")
    assert record is not None and record.state in ("delayed", "queued"), record
    assert record.attempts == 1, record

    seconds = _drain(store, queue, tmp_path, set(ids), 2, processes)
    assert ("done", "stuck", 2) in [(k, i, a) for _, k, i, a in seconds]
    stuck_record = _record(store, queue, "stuck")
    assert stuck_record is not None and stuck_record.state == "succeeded", stuck_record
    assert stuck_record.attempts == 2, stuck_record
    [again_at] = [t for t, k, i, a in seconds if k == "start" and i == "slow-1" and a == 2]
    assert again_at - ended < PROMPTLY, again_at - ended
    _check_counts(tmp_path, ids, seconds, stuck_done=True)
