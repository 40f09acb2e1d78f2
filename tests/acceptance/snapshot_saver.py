"""A process that saves a large snapshot over and over, to be killed mid-save; run as ``python -m``.

    python -m tests.acceptance.snapshot_saver PATH JOBS FIRST

It fills one FIFO queue (no worker running) with JOBS jobs ``j0``, ``j1``, ... whose data is
``{"g": generation, "i": n}`` and then, for generation FIRST, FIRST + 1, ...: sets every job's
``g`` to the generation, prints ``saving <g>``, saves the queue to PATH and prints
``saved <g> <seconds>``, flushing each line. Every generation's file differs from the last in
every job line, so a file mixing two generations cannot pass for either.
"""

from __future__ import annotations

import sys
import time

import varmq


def main(path: str, jobs: int, first: int) -> None:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    queue = worker.bind_queue(name="jobs")
    data = [{"g": first, "i": n} for n in range(jobs)]
    for n, payload in enumerate(data):
        queue.add(payload, job_id=f"j{n}")
    print("ready", flush=True)
    generation = first
    while True:
        for payload in data:
            payload["g"] = generation
        print(f"saving {generation}", flush=True)
        started = time.perf_counter()
        varmq.save_queues([queue], path)
        print(f"saved {generation} {time.perf_counter() - started:.3f}", flush=True)
        generation += 1


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
