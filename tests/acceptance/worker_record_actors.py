"""The consumer process of the worker-records acceptance test, run as ``python -m``.

    python -m tests.acceptance.worker_record_actors consume STORE QUEUE NAME

Runs a worker named NAME (concurrency 2) on the distributed queue QUEUE, its record refreshed
every 0.2 s and gone after 1 s without one (the defaults, 5 s and 15 s, made short so the test
waits little: the module-level timings of ``varmq.sources.registration``). Prints ``ready`` once
bound; on SIGTERM stops cleanly (``stop_and_wait``: the record is removed before it returns),
closes the store and exits 0.
"""

from __future__ import annotations

import signal
import sys
import threading

import varmq
from tests.acceptance.actors import open_store
from varmq.sources import registration

REFRESH = 0.2
EXPIRES_AFTER = 1.0


def consume(store: str, queue: str, name: str) -> None:
    registration.REFRESH_SECONDS = REFRESH
    registration.EXPIRES_AFTER = EXPIRES_AFTER
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    queues = open_store(store)
    worker = varmq.new_worker(lambda job: None, concurrency=2, name=name)
    worker.with_distributed_queue(queues.new_distributed_queue(queue))
    print("ready", flush=True)
    stop.wait()
    worker.stop_and_wait(10)
    queues.close()


if __name__ == "__main__":
    consume(*sys.argv[2:5])
