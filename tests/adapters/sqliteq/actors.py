"""Processes for the sqliteq failure tests: ``python actors.py ROLE PATH ...``.

- ``work PATH LOG LEASE SECONDS``: a varmq worker (concurrency 1) on the distributed queue
  ``work`` with ``visibility_timeout=LEASE``; each job runs SECONDS. It appends
  ``start <job id> <pid>`` to LOG when a job begins and ``done <job id> <pid>`` when it ends
  (one ``write`` on an ``O_APPEND`` file each), and prints ``ready`` once bound and each log
  line as well. SIGTERM stops it cleanly.
- ``produce PATH LOG``: adds jobs ``p<pid>-<n>`` to ``work`` through sqliteq, one after the
  other; appends ``ok <job id>`` once an add returned ``True`` and ``raised <job id> <error
  type>`` when it raised, prints ``ready`` after its first add, and stops after 20 raises.
- ``listen PATH``: a varmq worker on the distributed queue ``work`` that can only learn of a
  job through the doorbell: the watcher's poll and the worker's poll are an hour apart. Prints
  ``ready`` once subscribed (its bell socket bound) and ``start <job id>`` when a job begins.
- ``lock PATH SECONDS``: holds the write lock of PATH (``BEGIN IMMEDIATE``) for SECONDS,
  printing ``locked`` once it has it and ``unlocked`` after.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import threading
import time
from typing import Any


def _logger(path: str) -> Any:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(line: str) -> None:
        os.write(fd, (line + "\n").encode())
        print(line, flush=True)

    return log


def work(path: str, log_path: str, lease: float, seconds: float) -> None:
    import sqliteq
    import varmq

    log = _logger(log_path)
    queues = sqliteq.new(path, create=False)
    source = queues.new_distributed_queue("work", visibility_timeout=lease)

    def run(job: varmq.Job[Any]) -> None:
        log(f"start {job.id} {os.getpid()}")
        time.sleep(seconds)  # the job's own work
        log(f"done {job.id} {os.getpid()}")

    _serve(queues, varmq.new_worker(run, 1, poll_interval=0.2), source)


def _serve(queues: Any, worker: Any, source: Any) -> None:
    """Run ``worker`` on ``source``, print ``ready``, stop cleanly on SIGTERM."""
    worker.with_distributed_queue(source)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    stop.wait()
    worker.stop_and_wait()
    queues.close()


def produce(path: str, log_path: str) -> None:
    import sqliteq

    log = _logger(log_path)
    queues = sqliteq.new(path, create=False, busy_timeout=1.0)
    q = queues.new_queue("work")
    raised = 0
    n = 0
    while raised < 20:
        n += 1
        job_id = f"p{os.getpid()}-{n}"
        envelope = f'{{"id": "{job_id}", "status": "Created", "data": null}}'
        try:
            ok = q.enqueue_dedup(envelope, job_id)
        except sqliteq.SqliteqError as exc:
            raised += 1
            log(f"raised {job_id} {type(exc).__name__}")
            continue
        if ok:
            log(f"ok {job_id}")
        if n == 1:
            print("ready", flush=True)
    queues.close()


def listen(path: str) -> None:
    import sqliteq
    import sqliteq._watch
    import varmq

    sqliteq._watch.POLL_INTERVAL = 3600.0  # read when the watcher is made: only rings wake it
    queues = sqliteq.new(path, create=False)
    source = queues.new_distributed_queue("work")
    worker = varmq.new_worker(
        lambda job: print(f"start {job.id}", flush=True), 1, poll_interval=3600
    )
    _serve(queues, worker, source)


def lock(path: str, seconds: float) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    print("locked", flush=True)
    time.sleep(seconds)  # the stall itself
    conn.execute("ROLLBACK")
    conn.close()
    print("unlocked", flush=True)


if __name__ == "__main__":
    role, target = sys.argv[1], sys.argv[2]
    if role == "work":
        work(target, sys.argv[3], float(sys.argv[4]), float(sys.argv[5]))
    elif role == "produce":
        produce(target, sys.argv[3])
    elif role == "listen":
        listen(target)
    elif role == "lock":
        lock(target, float(sys.argv[3]))
    else:
        raise SystemExit(f"unknown role {role!r}")
