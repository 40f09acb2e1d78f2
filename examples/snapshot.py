"""Closing up for the night: save in-memory queues to one JSON file, bring them back next run.

The first run ("evening") adds orders to a FIFO queue and an urgent priority queue, with a
dead letter, a delayed job and one job still running, and saves everything with
``varmq.save_queues`` as it closes. The second run ("morning") loads the file with
``varmq.load_queues``, binds the queues to a new worker with their saved retry policy and
runs what was left: the job that was still running when the file was saved comes first (it
runs twice, once each side of the save: make jobs safe to repeat), and the delayed job runs
at its time. Each half is a process of its own, as it would be across a restart.

Run: ``python examples/snapshot.py`` (in a temporary directory), or
``python examples/snapshot.py queues.json`` to keep the file and read it.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import varmq

policy = varmq.Retry(max_attempts=2, backoff=0.01, jitter=False)
brewing = threading.Event()  # set while the evening's espresso is on the machine
closing = threading.Event()


def brew(job: varmq.Job[str]) -> None:
    if job.data == "cold brew":
        raise ValueError("out of ice")
    if job.data.startswith("espresso") and not closing.is_set():
        brewing.set()
        closing.wait(5)  # still brewing when the shop closes
    print(f"  served {job.data} (attempt {job.attempt})")


def evening(path: str) -> None:
    worker = varmq.new_worker(brew, 1, retry=policy)
    orders = worker.bind_queue(name="orders")
    urgent = worker.bind_priority_queue(name="urgent")

    orders.add("cold brew", job_id="cold")  # fails twice: a dead letter
    assert worker.wait(timeout=5)
    orders.add("espresso for Ana", job_id="ana")
    assert brewing.wait(5)
    orders.add("latte", job_id="latte")  # these wait behind the espresso
    orders.add("tea", job_id="tea")
    urgent.add("croissant", 5, job_id="croissant")
    urgent.add("water", 1, job_id="water")
    urgent.add("tomorrow's bread", 0, job_id="bread", delay=0.5)

    worker.stop()  # closing up: take nothing new; the espresso may finish
    varmq.save_queues([orders, urgent], path)  # one file, written atomically
    print(f"evening: saved {Path(path).stat().st_size} bytes to {path}")
    closing.set()
    worker.wait_until_stopped()


def morning(path: str) -> None:
    queues = varmq.load_queues(path, missing_ok=True)  # {} on the very first day
    for name, queue in queues.items():
        kind = "priority" if isinstance(queue, varmq.MemoryPriorityQueue) else "fifo"
        print(f"morning: {name} ({kind}) has {[job.data for job in queue.values()]}")

    worker = varmq.new_worker(brew, 1, auto_run=False)
    orders = worker.with_queue(queues["orders"], retry=queues["orders"].retry)
    worker.with_priority_queue(queues["urgent"], retry=queues["urgent"].retry)
    for letter in orders.dead_letters():
        print(f"morning: dead letter {letter.id!r} after {letter.attempts} runs: {letter.error}")
    worker.start()
    assert worker.wait(timeout=10)  # the delayed bread included
    worker.stop_and_wait()


def main() -> None:
    if len(sys.argv) == 3:  # one half, in a process of its own
        {"evening": evening, "morning": morning}[sys.argv[1]](sys.argv[2])
        return
    with tempfile.TemporaryDirectory() as directory:
        path = sys.argv[1] if len(sys.argv) == 2 else str(Path(directory) / "queues.json")
        for half in ("evening", "morning"):
            subprocess.run([sys.executable, __file__, half, path], check=True)


if __name__ == "__main__":
    main()
