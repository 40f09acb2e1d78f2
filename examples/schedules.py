"""A recurring job that fires once per occurrence, however many consumers declare it.

Shows: ``worker.schedule(name, every=SECONDS, data=..., queue=handle)`` declared by three
consumers of one queue; each occurrence is added by all three with the same job id
(``"heartbeat:2025-06-01T10:05:00.500Z"``) and runs once, thanks to the queue's dedup and its
job records (``keep_results``), with no leader; ``schedule.cancel()``. ``cron="*/5 * * * *"``
works the same way (``pip install 'varmq[cron]'``).

The three consumers are three workers on three queue objects of one store, as three processes
would have. The store is ``varmq.testing.MemoryStorage``, the reference storage, so that the
script runs anywhere with no server; in production each process opens the same queue of a
shared store (``sqliteq.new("jobs.db").new_distributed_queue("heartbeats",
keep_results=3600)`` once sqliteq keeps job records; see docs/schedules.md).

Run it with::

    python examples/schedules.py
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "adapters")]  # run from a plain checkout

import varmq  # noqa: E402
from varmq.testing import MemoryStorage  # noqa: E402

EVERY = 0.5  # seconds between two occurrences
RUN_FOR = 2.6  # seconds the consumers run

runs: Counter[str] = Counter()
lock = threading.Lock()  # guards runs


def heartbeat(job: varmq.Job[dict[str, str]]) -> None:
    with lock:
        runs[job.id] += 1


def main() -> None:
    store = MemoryStorage()
    consumers = []
    schedules = []
    for name in ("consumer-a", "consumer-b", "consumer-c"):
        worker = varmq.new_worker(heartbeat, 2, name=name)
        queue = worker.with_distributed_queue(
            store.new_distributed_queue("heartbeats", keep_results=3600)
        )
        # Every consumer declares the same schedule; occurrences are the same times everywhere.
        schedules.append(
            worker.schedule("heartbeat", every=EVERY, data={"from": name}, queue=queue)
        )
        consumers.append(worker)
    time.sleep(RUN_FOR)  # let a few occurrences pass
    for schedule in schedules:
        schedule.cancel()
    for worker in consumers:
        worker.wait()
        worker.stop_and_wait()
    store.close()

    for job_id, count in sorted(runs.items()):
        print(f"{job_id} ran {count} time{'s' if count > 1 else ''}")
    assert runs and set(runs.values()) == {1}, f"an occurrence ran twice: {runs}"
    assert len(runs) >= int(RUN_FOR / EVERY) - 1, runs
    print(f"{len(runs)} occurrences, each run once by one of {len(consumers)} consumers")


if __name__ == "__main__":
    main()
