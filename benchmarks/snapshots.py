"""Speed of saving and loading in-memory queues, against json.dump and json.load of the same data.

Each figure is measured in this process and this run, varmq and baseline alternating, in one
temporary directory (the same file system for both):

1. save: ``varmq.save_queues([queue], path)`` of a queue holding N jobs (ids, a small dict of
   data each; no worker running): copy under the queue's locks, checks, encoding, a temporary
   file, fsync, rename and directory fsync. Baseline: ``json.dump(document, file)`` of the
   very document that save wrote (parsed back from its file), no fsync.
2. load: ``varmq.load_queues(path)`` of that file: parsing, checking every field, building N
   job handles and the queue. Baseline: ``json.load(file)`` of the same file.

MB/s is the file's size over the time. Ratio = baseline seconds / varmq seconds (higher is
better for varmq); the target for save is 0.5 (the rest being fsync and bookkeeping). Every
figure is the best of ``--repeat`` runs. Run from the repository root::

    .venv/bin/python benchmarks/snapshots.py                   # 100,000 jobs, best of 3
    .venv/bin/python benchmarks/snapshots.py --quick           # 10,000 jobs, one run
    .venv/bin/python benchmarks/snapshots.py -n 200000 --priority
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(_ROOT)]

import varmq  # noqa: E402

SAVE_TARGET = 0.5


def payload(n: int) -> dict[str, Any]:
    return {"order": n, "email": f"user{n}@example.com", "items": ["coffee", "muffin"]}


def filled_queue(n: int, priority: bool) -> Any:
    worker = varmq.new_worker(lambda job: None, auto_run=False)
    if priority:
        queue = worker.bind_priority_queue(name="orders")
        for i in range(n):
            queue.add(payload(i), i % 10, job_id=f"order-{i}")
    else:
        queue = worker.bind_queue(name="orders")
        for i in range(n):
            queue.add(payload(i), job_id=f"order-{i}")
    return queue


def timed(fn: Callable[[], Any]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def best_of(
    repeat: int, varmq_run: Callable[[], Any], baseline: Callable[[], Any]
) -> tuple[float, float]:
    """Best seconds of each side, alternating which goes first."""
    ours, theirs = [], []
    for r in range(repeat):
        if r % 2:
            theirs.append(timed(baseline))
            ours.append(timed(varmq_run))
        else:
            ours.append(timed(varmq_run))
            theirs.append(timed(baseline))
    return min(ours), min(theirs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=100_000, help="jobs in the queue (default 100000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure; the best is kept")
    parser.add_argument("--quick", action="store_true", help="10,000 jobs, one run per figure")
    parser.add_argument("--priority", action="store_true", help="a priority queue (i % 10)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary dir)")
    args = parser.parse_args(argv)
    n, repeat = (10_000, 1) if args.quick else (args.n, args.repeat)

    print(f"python {platform.python_version()} on {platform.platform()}, {os.cpu_count()} CPUs")
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    queue = filled_queue(n, args.priority)
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        path = Path(directory) / "queues.json"
        plain = Path(directory) / "plain.json"
        varmq.save_queues([queue], path)
        size = path.stat().st_size
        document = json.loads(path.read_bytes())

        def dump() -> None:
            with open(plain, "w", encoding="utf-8") as file:
                json.dump(document, file)

        def load_plain() -> None:
            with open(path, encoding="utf-8") as file:
                json.load(file)

        save_s, dump_s = best_of(repeat, lambda: varmq.save_queues([queue], path), dump)
        load_s, json_load_s = best_of(repeat, lambda: varmq.load_queues(path), load_plain)
        print(f"file: {size / 1e6:.1f} MB for {n:,} jobs ({size / n:.0f} bytes a job)")
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print()
    mb = size / 1e6
    print(
        "| Operation | Jobs | varmq s | varmq MB/s | Baseline | Baseline s | Baseline MB/s "
        "| Ratio | Target |"
    )
    print("|---|---:|---:|---:|---|---:|---:|---:|---|")
    rows = [
        ("save", save_s, "json.dump to a file", dump_s, SAVE_TARGET),
        ("load", load_s, "json.load of the file", json_load_s, None),
    ]
    for name, ours, baseline, theirs, target in rows:
        ratio = theirs / ours
        goal = "" if target is None else f">= {target}: {'met' if ratio >= target else 'MISSED'}"
        print(
            f"| {name} | {n:,} | {ours:.3f} | {mb / ours:.1f} | `{baseline}` | {theirs:.3f} "
            f"| {mb / theirs:.1f} | {ratio:.2f} | {goal} |"
        )
    print()
    print("ratio = baseline seconds / varmq seconds (higher is better for varmq)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
