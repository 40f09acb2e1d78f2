"""Quickstart: run a function on jobs from an in-memory queue.

Shows ``varmq.new_worker`` with a concurrency of 4, ``bind_queue``, ``add`` and
``worker.wait()``, then the worker's metrics, and stopping the worker.

Run it with::

    python examples/quickstart.py
"""

from __future__ import annotations

import threading
import time

import varmq

printed = threading.Lock()


def greet(job: varmq.Job[str]) -> None:
    time.sleep(0.05)  # pretend to do some I/O
    with printed:
        print(f"hello, {job.data} (job {job.id}, {threading.current_thread().name})")


def main() -> None:
    worker = varmq.new_worker(greet, 4, name="greeter")  # 4 jobs at a time; started
    queue = worker.bind_queue()

    for name in ["Ada", "Grace", "Linus", "Barbara", "Ken", "Margaret"]:
        queue.add(name, job_id=f"greet-{name.lower()}")

    worker.wait()  # until the queue is drained and nothing runs
    m = worker.metrics
    print(f"submitted={m.submitted} completed={m.completed} successful={m.successful}")

    worker.stop_and_wait()  # running jobs finish first; then the threads are gone
    print(f"worker is {worker.status}")


if __name__ == "__main__":
    main()
