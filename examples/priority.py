"""Priority queue: lower numbers run first, equal priorities in the order they were added.

The worker is created paused (``auto_run=False``) so that every job is queued before the first
one runs; then the run order shows the priority order. Concurrency 1 keeps the order visible.

Run it with::

    python examples/priority.py
"""

from __future__ import annotations

import varmq

order: list[str] = []


def record(job: varmq.Job[str]) -> None:
    order.append(job.data)


def main() -> None:
    worker = varmq.new_worker(record, 1, auto_run=False)
    queue = worker.bind_priority_queue()

    queue.add("newsletter (5)", 5)
    queue.add("password reset (0)", 0)
    queue.add("invoice (2)", 2)
    queue.add("second password reset (0)", 0)
    queue.add("digest (9)", 9)
    # add_all takes Item(data, priority=...) as well
    queue.add_all([varmq.Item("receipt (2)", priority=2), varmq.Item("survey (7)", priority=7)])
    print(f"{len(queue)} jobs queued; starting the worker")

    worker.start()
    worker.wait()
    for position, name in enumerate(order, 1):
        print(f"{position}. {name}")

    worker.stop_and_wait()


if __name__ == "__main__":
    main()
