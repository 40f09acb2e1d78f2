"""Changing a running worker's concurrency with ``tune_pool``.

A worker starts with concurrency 2 and a backlog of slow jobs. While it works, the example
raises the concurrency to 8, then lowers it to 3, and samples ``num_processing`` (jobs running
now), ``num_concurrency`` (the limit) and ``num_pending`` (jobs waiting) after each change.
Lowering never interrupts a running job: the extra jobs finish and no new ones start until the
worker is under the new limit.

Run it with::

    python examples/tune_pool.py
"""

from __future__ import annotations

import time

import varmq


def slow(job: varmq.Job[int]) -> None:
    time.sleep(0.1)


def show(worker: varmq.Worker[int], when: str) -> None:
    print(
        f"{when:<28} concurrency={worker.num_concurrency:<2} "
        f"processing={worker.num_processing:<2} pending={worker.num_pending:<3} "
        f"idle threads={worker.num_idle_workers}"
    )


def main() -> None:
    worker = varmq.new_worker(slow, 2)
    queue = worker.bind_queue()
    queue.add_all(range(60))

    time.sleep(0.15)
    show(worker, "started with 2")

    worker.tune_pool(8)
    time.sleep(0.15)
    show(worker, "after tune_pool(8)")

    worker.tune_pool(3)
    show(worker, "right after tune_pool(3)")
    time.sleep(0.15)
    show(worker, "a moment later")

    try:
        worker.tune_pool(3)
    except varmq.SameConcurrencyError as exc:
        print(f"tune_pool(3) again: {exc}")

    worker.wait()
    show(worker, "drained")
    print(f"completed={worker.metrics.completed}")

    worker.stop_and_wait()
    try:
        worker.tune_pool(4)
    except varmq.WorkerStoppedError as exc:
        print(f"tune_pool on a stopped worker: {exc}")


if __name__ == "__main__":
    main()
