"""Acceptance: job records across real processes; one consumer is killed with SIGKILL.

A producer process adds 200 jobs with ids to a queue opened with ``keep_results``; two consumer
processes (result workers) run them; a third process, which runs no job, waits for every id
with ``result_of`` and prints each result with its record. In the second test one consumer is
SIGKILLed in the middle of its jobs: the waiting process still gets every result, the ones the
killed consumer had started from their rerun in the other consumer (a record never said
``succeeded`` for a job that was run again). Both bounded well under 90 s.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any

import pytest

from tests.acceptance.process_tools import STORES, expect_line, spawn, store_url

pytestmark = pytest.mark.timeout(90)

JOBS = 200
JOB_SECONDS = 0.02
WAIT_TIMEOUT = 60.0
"""Seconds the waiting process gives every job in all."""


def _spawn(*args: str, stdout: int | IO[Any] = subprocess.PIPE) -> subprocess.Popen[str]:
    return spawn("tests.acceptance.record_actors", *args, stdout=stdout)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request, tmp_path)


def _results(waiter: subprocess.Popen[str]) -> dict[str, dict[str, Any]]:
    """Every line the waiting process printed, by job id, once it finished."""
    out, _ = waiter.communicate(timeout=WAIT_TIMEOUT + 15)
    lines = out.splitlines()
    assert waiter.returncode == 0 and lines[-1:] == ["finished"], lines[-3:]
    return {line["id"]: line for line in map(json.loads, lines[:-1])}


def _check_every_result(results: dict[str, dict[str, Any]]) -> None:
    assert sorted(results) == sorted(f"job-{i}" for i in range(JOBS))
    for i in range(JOBS):
        line = results[f"job-{i}"]
        assert line["state"] == "succeeded" and line["result"]["square"] == i * i, line


def _stop(consumer: subprocess.Popen[str]) -> None:
    consumer.send_signal(signal.SIGTERM)
    assert consumer.wait(timeout=30) == 0, "a consumer did not stop cleanly"


def test_a_waiting_process_gets_every_result_of_two_consumer_processes(
    store: str, processes: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    queue = f"records-{time.time_ns()}"
    consumers = [_spawn("consume", store, queue, str(JOB_SECONDS)) for _ in range(2)]
    processes.extend(consumers)
    for consumer in consumers:
        expect_line(consumer, "ready")
    logs = [tmp_path / f"consumer-{n}.log" for n in range(2)]
    drains = [_drain_to(consumer, log) for consumer, log in zip(consumers, logs, strict=True)]
    producer = _spawn("produce", store, queue, str(JOBS), stdout=subprocess.DEVNULL)
    processes.append(producer)
    assert producer.wait(timeout=30) == 0
    started = time.monotonic()
    waiter = _spawn("wait", store, queue, str(JOBS), str(WAIT_TIMEOUT))
    processes.append(waiter)
    results = _results(waiter)
    waited = time.monotonic() - started
    _check_every_result(results)
    for consumer in consumers:
        _stop(consumer)
    for drain in drains:
        drain.join()
    pids = {line["result"]["pid"] for line in results.values()}
    assert len(pids) == 2, "both consumers ran jobs"
    assert all(line["attempts"] == 1 for line in results.values()), "no crash, no rerun"
    print(f"\n{JOBS} results read by a waiting process in {waited:.2f} s; both consumers ran jobs")


def test_the_waiting_process_gets_every_result_when_a_consumer_is_killed_mid_run(
    store: str, processes: list[subprocess.Popen[str]], tmp_path: Path
) -> None:
    queue = f"records-kill-{time.time_ns()}"
    victim = _spawn("consume", store, queue, str(JOB_SECONDS * 5))
    survivor = _spawn("consume", store, queue, str(JOB_SECONDS))
    processes.extend([victim, survivor])
    expect_line(victim, "ready")
    expect_line(survivor, "ready")
    drain = _drain_to(survivor, tmp_path / "survivor.log")
    producer = _spawn("produce", store, queue, str(JOBS), stdout=subprocess.DEVNULL)
    processes.append(producer)
    assert producer.wait(timeout=30) == 0  # every id is there before anybody waits for it
    waiter = _spawn("wait", store, queue, str(JOBS), str(WAIT_TIMEOUT))
    processes.append(waiter)

    # Kill the victim in the middle of a job: after its 10th finished job, at its next start.
    assert victim.stdout is not None
    seen: list[str] = []
    for line in victim.stdout:
        seen.append(line.strip())
        if sum(s.startswith("done ") for s in seen) >= 10 and seen[-1].startswith("start "):
            break
    victim.send_signal(signal.SIGKILL)
    victim.wait(timeout=10)
    seen.extend(line.strip() for line in victim.stdout)  # what it printed before it died
    started = {s[6:] for s in seen if s.startswith("start ")}
    finished = {s[5:] for s in seen if s.startswith("done ")}
    interrupted = started - finished
    assert interrupted, "the victim was killed between jobs"

    results = _results(waiter)
    _check_every_result(results)
    _stop(survivor)
    drain.join()
    for job_id in interrupted:
        line = results[job_id]
        # The result the waiter got is the rerun's: the killed consumer never settled it.
        assert line["attempts"] >= 2 and line["result"]["pid"] == survivor.pid, line
    reruns = sum(1 for line in results.values() if line["attempts"] > 1)
    print(
        f"\nconsumer SIGKILLed in {len(interrupted)} job(s); {JOBS} results all read by the "
        f"waiting process, {reruns} from a rerun"
    )


def _drain_to(process: subprocess.Popen[str], log: Path) -> threading.Thread:
    """Copy ``process``'s output to ``log`` on a thread, so that it never blocks on a full
    pipe; returns the thread."""

    def copy() -> None:
        assert process.stdout is not None
        with log.open("w") as out:
            for line in process.stdout:
                out.write(line)

    thread = threading.Thread(target=copy, daemon=True)
    thread.start()
    return thread
