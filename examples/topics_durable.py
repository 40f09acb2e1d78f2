"""Durable topics in one SQLite file: a publisher process and a consumer process.

The binding ``orders.#`` -> queue ``orders-audit`` is stored in the file, so the publisher (this
process) routes every order event into that queue, and a varmq worker in another process runs
each copy as a job. Copies are durable: they wait in the queue while no consumer runs (unlike a
live subscription, which only hears what is published while it listens). Publishing with a
``message_id`` makes a retried publish store nothing twice.

Run it from the repository root::

    python examples/topics_durable.py

It creates ``orders.db`` in a temporary directory and removes it afterwards.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapters"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import sqliteq  # after the path set-up above, so that it runs from a plain checkout
import varmq

ORDERS = 10
QUEUE = "orders-audit"


def consume(path: str) -> None:
    """The consumer process: run every copy waiting in the bound queue, then exit."""
    seen: list[str] = []
    lock = threading.Lock()
    all_ran = threading.Event()

    def audit(job: varmq.Job[dict[str, Any]]) -> None:
        with lock:
            seen.append(f"{job.id}: order {job.data['order']} {job.data['event']}")
            if len(seen) == ORDERS:
                all_ran.set()

    with sqliteq.new(path) as queues:
        worker = varmq.new_worker(audit, 2)
        worker.with_distributed_queue(queues.new_distributed_queue(QUEUE))
        finished = all_ran.wait(30)
        worker.stop_and_wait(timeout=10)
    for line in sorted(seen):
        print("  consumer ran", line)
    sys.exit(0 if finished else 1)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = str(Path(tmp) / "orders.db")
        with sqliteq.new(path) as queues:
            topics = queues.topics()
            topics.bind("orders.#", QUEUE)  # stored in the file: every process honours it
            print("bindings:", topics.bindings())
            stored = 0
            for n in range(ORDERS):
                event = "created" if n % 2 == 0 else "paid"
                stored += topics.publish(
                    f"orders.eu.{event}", {"order": n, "event": event}, message_id=f"order-{n}"
                )
            # The reply of the last publish was lost; publishing it again stores nothing while
            # its copy waits or runs (once it ran, the id is free again).
            again = topics.publish(
                "orders.eu.paid", {"order": ORDERS - 1, "event": "paid"}, message_id="order-9"
            )
            print(f"publisher: {stored} copies stored, the retried publish stored {again}")
        # The consumer process starts only now: the copies waited for it in the file.
        code = subprocess.run([sys.executable, __file__, "consume", path], timeout=60).returncode
        if code != 0 or stored != ORDERS or again != 0:
            sys.exit(1)
        print("every order event ran once in the consumer process")


if __name__ == "__main__":
    if sys.argv[1:2] == ["consume"]:
        consume(sys.argv[2])
    else:
        main()
