"""A durable job queue in one SQLite file, shared by a producer and two consumer processes.

Shows: opening a file with ``sqliteq.new``, adding jobs (one with a job id, added twice but
stored once), taking them in batches with leases, acknowledging them, and waking consumers
through ``subscribe`` when another process adds work. Uses only sqliteq's own API.

Run it from the repository root::

    python examples/sqlite_queue.py

It creates ``sqlite_queue_example.db`` in a temporary directory and removes it afterwards.
"""

from __future__ import annotations

import multiprocessing
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapters"))

import sqliteq  # after the path set-up above, so that it runs from a plain checkout

JOBS = 20


def consume(worker: str, path: str, done: Any, stop: Any) -> None:
    """Take jobs from the "emails" queue in batches of 4 until told to stop."""
    with sqliteq.new(path) as queues:
        q = queues.new_distributed_queue("emails", visibility_timeout=30)
        wake = threading.Event()
        q.subscribe(lambda _message: wake.set())  # any process added a job
        while not stop.is_set():
            batch = q.dequeue_batch_with_ack_ids(4)
            if not batch:
                wake.wait(0.5)  # woken by the watcher; the timeout is only a fallback poll
                wake.clear()
                continue
            for data, ack_id in batch:
                done.put(f"{worker} ran {data.decode()}")
                q.acknowledge(ack_id)  # only now is the job gone for good


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "sqlite_queue_example.db")
        sqliteq.new(path).close()  # create the file before the consumers open it
        ctx = multiprocessing.get_context("spawn")
        done, stop = ctx.Queue(), ctx.Event()
        consumers = [
            ctx.Process(target=consume, args=(f"worker-{i}", path, done, stop)) for i in range(2)
        ]
        for p in consumers:
            p.start()

        with sqliteq.new(path) as queues:
            q = queues.new_distributed_queue("emails")
            for i in range(JOBS):
                q.enqueue(f"email-{i}".encode())
            # Dedup: the same job id twice is stored once while it waits or runs.
            q.enqueue_dedup(b"welcome-mail", "user-42-welcome")
            q.enqueue_dedup(b"welcome-mail", "user-42-welcome")
            lines = [done.get(timeout=30) for _ in range(JOBS + 1)]
        stop.set()
        for p in consumers:
            p.join(30)
        print(f"{len(lines)} jobs ran (expected {JOBS + 1}):")
        for line in sorted(lines):
            print(" ", line)


if __name__ == "__main__":
    main()
