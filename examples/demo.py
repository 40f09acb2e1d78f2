"""Demonstration: durable jobs over one SQLite file survive a consumer killed mid-run.

A producer process stores 2,000 jobs in a SQLite queue. Two consumer processes run workers
on it. Once consumer A has done a few hundred jobs it is killed with SIGKILL, in the middle of
jobs. The jobs it had taken come back when their lease runs out and consumer B runs them.
The demo then counts every job id: none is lost; the only ones run twice are the ones the
killed consumer had finished but not yet acknowledged.

Run it with ``python3 run.py demo`` (or ``python examples/demo.py``); it takes a few seconds.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import sqliteq
import varmq

JOBS = 2_000
LEASE = 2.0  # seconds a taken job stays leased unless its worker renews it
KILL_AFTER = 300  # consumer A is killed once it has done this many jobs


def produce(db: Path) -> None:
    queues = sqliteq.new(str(db))
    handle = varmq.new_distributed_queue(queues.new_distributed_queue("demo"))
    for i in range(JOBS):
        assert handle.add({"n": i}, job_id=f"job-{i}")
    queues.close()


def consume(db: Path, log: Path) -> None:
    queues = sqliteq.new(str(db))
    queue = queues.new_distributed_queue("demo", visibility_timeout=LEASE)
    with log.open("a", buffering=1) as out:

        def work(job: varmq.Job[dict[str, int]]) -> None:
            out.write(f"start {job.id}\n")
            time.sleep(0.002)  # pretend to do something
            out.write(f"done {job.id}\n")  # recorded before the acknowledgement

        worker = varmq.new_worker(work, 4)
        worker.with_distributed_queue(queue)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        stop.wait()
        worker.stop_and_wait()  # running jobs finish and acknowledge before the close
    queues.close()


def ids(log: Path, word: str) -> list[str]:
    try:
        lines = log.read_text().splitlines()
    except FileNotFoundError:
        return []
    return [line.split()[1] for line in lines if line.startswith(word + " ")]


def done_ids(log: Path) -> list[str]:
    return ids(log, "done")


def spawn(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, __file__, *args])


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        db, log_a, log_b = Path(tmp, "jobs.db"), Path(tmp, "a.log"), Path(tmp, "b.log")
        started = time.monotonic()
        sqliteq.new(str(db)).close()  # create the file before three processes race to
        producer = spawn("produce", str(db))
        consumer_a = spawn("consume", str(db), str(log_a))
        consumer_b = spawn("consume", str(db), str(log_b))
        print(f"producer and two consumers started on {db.name}: {JOBS} jobs")

        while len(done_ids(log_a)) < KILL_AFTER:
            time.sleep(0.01)
        consumer_a.send_signal(signal.SIGKILL)
        consumer_a.wait()
        killed_at = len(done_ids(log_a))
        print(f"consumer A killed with SIGKILL after {killed_at} jobs, in the middle of jobs")

        producer.wait()
        deadline = time.monotonic() + 50
        expected = {f"job-{i}" for i in range(JOBS)}
        while time.monotonic() < deadline:
            if expected <= set(done_ids(log_a)) | set(done_ids(log_b)):
                break
            time.sleep(0.1)
        consumer_b.send_signal(signal.SIGTERM)
        consumer_b.wait(timeout=30)

        runs = Counter(done_ids(log_a)) + Counter(done_ids(log_b))
        missing = expected - set(runs)
        twice = sorted(job for job, n in runs.items() if n > 1)
        interrupted = set(ids(log_a, "start")) - set(done_ids(log_a))
        print(f"consumer B finished the rest: {len(done_ids(log_b))} jobs")
        print(
            f"{len(interrupted)} jobs were running in A when it died; their leases ran out and "
            f"B ran {len(interrupted & set(done_ids(log_b)))} of them"
        )
        print(f"completed: {len(expected) - len(missing)} of {JOBS} job ids")
        print(f"run twice: {len(twice)} (finished by A but not yet acknowledged when it died)")
        print(f"lost: {len(missing)}")
        print(f"took {time.monotonic() - started:.1f} s")
        if missing:
            print("FAILED: jobs were lost:", sorted(missing)[:10])
            return 1
        print("every job completed despite the killed consumer")
        return 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "produce":
        produce(Path(sys.argv[2]))
    elif len(sys.argv) > 1 and sys.argv[1] == "consume":
        consume(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        sys.exit(main())
