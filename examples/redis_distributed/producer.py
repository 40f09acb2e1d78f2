# example: requires redis
"""Producer of a queue shared through Redis by processes on several hosts (run consumer.py too).

Shows: opening a distributed queue with ``redisq.new(url).new_distributed_queue(name)``, wrapping
it in a producer-only varmq handle (``varmq.new_distributed_queue``: no worker in this process)
and adding jobs, each with a job id so that running the producer twice adds nothing twice while
the jobs are still stored. Any number of producers and consumers may run on any hosts that reach
the same Redis.

Run it from the repository root, with consumers started anywhere::

    python examples/redis_distributed/consumer.py --url redis://redis.internal:6379/0 &
    python examples/redis_distributed/producer.py --url redis://redis.internal:6379/0 -n 100

Prints one line, ``added <count>``, and exits 0 (1 when Redis refused some jobs).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "adapters")]  # run from a plain checkout

import redisq  # noqa: E402  (after the path set-up above)
import varmq  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Add jobs to a Redis queue shared by hosts.")
    parser.add_argument("--url", default="redis://localhost:6379/0", help="Redis URL")
    parser.add_argument("--queue", default="redis-distributed-example", help="queue name")
    parser.add_argument("-n", type=int, default=20, help="how many jobs to add")
    parser.add_argument("--first", type=int, default=0, help="number of the first job")
    args = parser.parse_args(argv)

    with redisq.new(args.url) as rdb:
        jobs = varmq.new_distributed_queue(rdb.new_distributed_queue(args.queue))
        added = 0
        for number in range(args.first, args.first + args.n):
            # A job id makes the add idempotent while the job is stored: a producer that is
            # restarted after a crash can add the same numbers again safely.
            if jobs.add({"number": number}, job_id=f"job-{number}"):
                added += 1
    print(f"added {added}", flush=True)
    return 0 if added == args.n else 1


if __name__ == "__main__":
    sys.exit(main())
