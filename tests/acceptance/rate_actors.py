"""The consumer processes of the rate-limit acceptance test, run as ``python -m``.

    python -m tests.acceptance.rate_actors consume STORE QUEUE LOG

Opens QUEUE (distributed, ``rate_limit`` as stored by the test) and runs a worker of
concurrency 4 whose function appends ``<job data> <monotonic time> <pid>`` to LOG (one
``os.write`` to a file opened with ``O_APPEND``: whole lines, seen at once by the test, which
compares these CLOCK_MONOTONIC times with its own). Prints ``ready`` once bound; stops cleanly
on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

import varmq
from tests.acceptance.actors import open_store


def consume(store: str, queue: str, log: str) -> None:
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())

    def run(job: varmq.Job[Any]) -> None:
        os.write(fd, f"{job.data} {time.monotonic():.6f} {os.getpid()}\n".encode())

    queues = open_store(store)
    worker = varmq.new_worker(run, concurrency=4)
    worker.with_distributed_queue(queues.new_distributed_queue(queue))
    print("ready", flush=True)
    stop.wait()
    worker.stop()
    queues.close()
    os.close(fd)


if __name__ == "__main__":
    consume(*sys.argv[2:5])
