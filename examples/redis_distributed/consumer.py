# example: requires redis
"""Consumer of a queue shared through Redis: a varmq worker on a redisq distributed queue.

Shows: binding ``redisq``'s distributed queue to a worker (``with_distributed_queue``), which
takes jobs in batches with leases, acknowledges them after the function returned, hears
"enqueued" from producers on other hosts, and polls as a safety net. A consumer killed mid-job
loses nothing: its leases expire and another consumer gets the jobs. Start as many as you like,
on as many hosts as you like; each job runs in one of them.

Run it from the repository root (see producer.py)::

    python examples/redis_distributed/consumer.py --url redis://redis.internal:6379/0
    python examples/redis_distributed/consumer.py --expect 100   # exit after 100 jobs

Prints ``ready`` once it listens, ``done <number>`` per job, and ``processed <count>`` when it
stops: after ``--expect`` jobs, or on SIGTERM / SIGINT (jobs already taken are finished first).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "adapters")]  # run from a plain checkout

import redisq  # noqa: E402  (after the path set-up above)
import varmq  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run jobs from a Redis queue shared by hosts.")
    parser.add_argument("--url", default="redis://localhost:6379/0", help="Redis URL")
    parser.add_argument("--queue", default="redis-distributed-example", help="queue name")
    parser.add_argument("--concurrency", type=int, default=4, help="jobs run at once")
    parser.add_argument("--expect", type=int, default=0, help="exit after this many jobs (0: run)")
    parser.add_argument("--lease", type=float, default=30.0, help="visibility timeout, seconds")
    args = parser.parse_args(argv)

    stop = threading.Event()  # set by a signal or once --expect jobs are done
    lock = threading.Lock()  # guards processed (jobs this process finished) and stdout
    processed = 0

    def handle(job: Any) -> None:
        nonlocal processed
        number = job.data["number"]  # the work goes here; make it idempotent
        with lock:  # one line at a time from the worker's threads
            print(f"done {number}", flush=True)
            processed += 1
            if args.expect and processed >= args.expect:
                stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())

    with redisq.new(args.url) as rdb:
        worker = varmq.new_worker(handle, args.concurrency, name="redis-distributed-consumer")
        worker.with_distributed_queue(
            rdb.new_distributed_queue(args.queue, visibility_timeout=args.lease)
        )
        print("ready", flush=True)
        while not stop.wait(0.5):  # wakes at once on stop; the timeout lets signals run
            pass
        worker.stop_and_wait()  # finishes and acknowledges the jobs already taken
    with lock:
        print(f"processed {processed}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
