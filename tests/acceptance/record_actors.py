"""Processes for the job-record and schedule acceptance tests, run as ``python -m``.

    python -m tests.acceptance.record_actors schedule STORE QUEUE NAME LOG
    python -m tests.acceptance.record_actors produce STORE QUEUE COUNT
    python -m tests.acceptance.record_actors consume STORE QUEUE LOG JOB_SECONDS
    python -m tests.acceptance.record_actors wait STORE QUEUE COUNT

STORE is ``sqlite:<path>`` or a ``redis://`` URL; every queue here keeps job records
(``keep_results``). ``schedule`` declares the schedule NAME (``every=1``) on QUEUE and runs its
occurrences, appending ``run <job id> <pid>`` to LOG for each. ``produce`` adds jobs ``job-0``
.. ``job-<COUNT-1>`` with data ``{"n": i}``. ``consume`` runs them with a result worker (the
result is ``{"square": n * n}`` after JOB_SECONDS of work), appending ``start <id>`` before and
``done <id>`` after the function, before the acknowledgement. ``wait`` waits with
``result_of`` for every id, then prints one JSON line per job: id, result and attempts.
A long-running process prints ``ready`` on stdout once its worker runs; SIGTERM stops it
cleanly (running jobs finish and are settled first).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from typing import Any

import varmq
from tests.acceptance.actors import open_store

KEEP = 300.0  # keep_results of every queue here, in seconds
LEASE = 2.0  # visibility_timeout: a killed consumer's jobs come back this soon


def _serve(worker: Any) -> None:
    """Say ``ready`` and run until SIGTERM, then stop ``worker`` cleanly."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    stop.wait()
    worker.stop_and_wait()


def schedule(store: str, queue: str, name: str, log_path: str) -> None:
    queues = open_store(store)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()

    def work(job: varmq.Job[Any]) -> None:
        os.write(fd, f"run {job.id} {pid}\n".encode())  # one write: whole lines under a kill

    worker = varmq.new_worker(work, 2, poll_interval=0.2)
    handle = worker.with_distributed_queue(
        queues.new_distributed_queue(queue, keep_results=KEEP, visibility_timeout=LEASE)
    )
    worker.schedule(name, every=1, data={"from": pid}, queue=handle)
    _serve(worker)
    queues.close()
    os.close(fd)


def produce(store: str, queue: str, count: int) -> None:
    queues = open_store(store)
    handle = varmq.new_distributed_queue(queues.new_distributed_queue(queue, keep_results=KEEP))
    for i in range(count):
        while not handle.add({"n": i}, job_id=f"job-{i}"):
            time.sleep(0.05)  # refused for a moment: try again, the job id keeps it once
    queues.close()


def consume(store: str, queue: str, log_path: str, job_seconds: float) -> None:
    queues = open_store(store)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def square(job: varmq.Job[dict[str, int]]) -> dict[str, int]:
        os.write(fd, f"start {job.id}\n".encode())
        time.sleep(job_seconds)  # the work
        os.write(fd, f"done {job.id}\n".encode())
        return {"square": job.data["n"] ** 2}

    worker: varmq.ResultWorker[Any, Any] = varmq.new_result_worker(square, 4, poll_interval=0.2)
    worker.with_distributed_queue(
        queues.new_distributed_queue(queue, keep_results=KEEP, visibility_timeout=LEASE)
    )
    _serve(worker)
    queues.close()
    os.close(fd)


def wait(store: str, queue: str, count: int) -> None:
    queues = open_store(store)
    handle = varmq.new_distributed_queue(queues.new_distributed_queue(queue, keep_results=KEEP))
    lines = []
    for i in range(count):
        job_id = f"job-{i}"
        result = handle.result_of(job_id, timeout=60)
        record = handle.job(job_id)
        attempts = None if record is None else record.attempts
        lines.append(json.dumps({"id": job_id, "result": result, "attempts": attempts}))
    print("\n".join(lines), flush=True)
    queues.close()


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "schedule":
        schedule(args[0], args[1], args[2], args[3])
    elif command == "produce":
        produce(args[0], args[1], int(args[2]))
    elif command == "consume":
        consume(args[0], args[1], args[2], float(args[3]))
    elif command == "wait":
        wait(args[0], args[1], int(args[2]))
    else:
        raise SystemExit(f"unknown command {command!r}")
