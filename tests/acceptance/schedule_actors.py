"""The processes of the schedule acceptance test, run as ``python -m``.

    python -m tests.acceptance.schedule_actors schedule STORE QUEUE NAME LOG

STORE is ``sqlite:<path>`` or a ``redis://`` URL. ``schedule`` declares the schedule NAME
(``every=1``) on QUEUE, which keeps job records (``keep_results``), and runs its occurrences,
appending ``run <job id> <pid>`` to LOG for each. It prints ``ready`` on stdout once its worker
runs; SIGTERM stops it cleanly (running jobs finish and are settled first).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
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


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command != "schedule":
        raise SystemExit(f"unknown command {command!r}")
    schedule(args[0], args[1], args[2], args[3])
