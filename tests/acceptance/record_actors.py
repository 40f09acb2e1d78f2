"""Processes of the job-record acceptance tests, run as ``python -m``.

    python -m tests.acceptance.record_actors produce STORE QUEUE COUNT
    python -m tests.acceptance.record_actors consume STORE QUEUE JOB_SECONDS
    python -m tests.acceptance.record_actors wait STORE QUEUE COUNT TIMEOUT

STORE is ``sqlite:<path>`` or a ``redis://`` URL; every process opens QUEUE with
``keep_results=KEEP``. ``produce`` adds jobs ``job-0`` ... with ``{"n": i}``. ``consume`` runs a
result worker whose jobs take JOB_SECONDS and return ``{"square": n * n, "pid": <its pid>}``;
it prints ``ready``, then ``start <id>`` when a job begins and ``done <id>`` when its function
returned (before the settle), one flushed line each, and stops cleanly on SIGTERM. ``wait``
runs no job: it waits for each job with ``result_of`` (by the storage's record notifications,
not a read loop) and prints one JSON line per job, ``{"id", "result", "state", "attempts"}``,
then ``finished``.
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

KEEP = 600.0
"""``keep_results`` of every process: records outlive the test."""
LEASE = 2.0
"""``visibility_timeout``: a killed consumer's jobs come back within this."""


def _open(store: str, queue: str) -> tuple[Any, Any]:
    queues = open_store(store)
    return queues, queues.new_distributed_queue(queue, keep_results=KEEP, visibility_timeout=LEASE)


def _say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def produce(store: str, queue: str, count: int) -> None:
    queues, q = _open(store, queue)
    handle = varmq.new_distributed_queue(q)
    for i in range(count):
        assert handle.add({"n": i}, job_id=f"job-{i}", strict=True)
    queues.close()


def consume(store: str, queue: str, job_seconds: float) -> None:
    queues, q = _open(store, queue)
    pid = os.getpid()

    def square(job: varmq.Job[dict[str, int]]) -> dict[str, int]:
        _say(f"start {job.id}")
        time.sleep(job_seconds)  # the job's work
        _say(f"done {job.id}")
        return {"square": job.data["n"] ** 2, "pid": pid}

    worker = varmq.new_result_worker(square, 2)
    worker.with_distributed_queue(q)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    _say("ready")
    stop.wait()
    worker.stop_and_wait()
    queues.close()


def wait(store: str, queue: str, count: int, timeout: float) -> None:
    queues, q = _open(store, queue)
    handle = varmq.new_distributed_queue(q)
    deadline = time.monotonic() + timeout
    for i in range(count):
        job_id = f"job-{i}"
        result = handle.result_of(job_id, timeout=max(0.1, deadline - time.monotonic()))
        record = handle.job(job_id)
        assert record is not None
        line = {"id": job_id, "result": result, "state": record.state, "attempts": record.attempts}
        _say(json.dumps(line))
    _say("finished")
    queues.close()


if __name__ == "__main__":
    role, store, queue = sys.argv[1], sys.argv[2], sys.argv[3]
    if role == "produce":
        produce(store, queue, int(sys.argv[4]))
    elif role == "consume":
        consume(store, queue, float(sys.argv[4]))
    else:
        wait(store, queue, int(sys.argv[4]), float(sys.argv[5]))
