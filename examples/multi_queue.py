"""Several queues on one worker: how each strategy picks the next queue.

Three in-memory queues are bound to one worker: ``urgent`` (rank 0), ``normal`` (rank 1) and
``bulk`` (rank 2; ranks are the ``priority=`` given when binding). The same jobs are queued
(2 urgent, 3 normal, 5 bulk) while the worker is not started, then it runs them with
concurrency 1 and the order it picked them in is printed, once per strategy:

- ``Strategy.PRIORITY`` (default): always the lowest-ranked queue that has jobs;
- ``Strategy.ROUND_ROBIN``: the next queue with jobs, in turn;
- ``Strategy.MAX_LEN``: the queue with the most jobs waiting;
- ``Strategy.MIN_LEN``: the queue with the fewest jobs waiting (among those with any).

Run it with::

    python examples/multi_queue.py
"""

from __future__ import annotations

import varmq


def run_with(strategy: varmq.Strategy) -> list[str]:
    picked: list[str] = []

    def handle(job: varmq.Job[str]) -> None:
        picked.append(job.data)

    worker = varmq.new_worker(handle, 1, strategy=strategy, auto_run=False)
    # Bind order is deliberately not rank order: ranks decide, not the order of binding.
    bulk = worker.bind_queue(priority=2)
    urgent = worker.bind_queue(priority=0)
    normal = worker.bind_queue(priority=1)

    for _ in range(2):
        urgent.add("urgent")
    for _ in range(3):
        normal.add("normal")
    bulk.add_all(["bulk"] * 5)

    worker.start()
    worker.wait()
    worker.stop_and_wait()
    return picked


def main() -> None:
    for strategy in varmq.Strategy:
        picked = run_with(strategy)
        print(f"{strategy.name:<11} {' '.join(picked)}")


if __name__ == "__main__":
    main()
