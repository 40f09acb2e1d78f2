"""Producer and consumer processes for the acceptance tests, run as ``python -m``.

    python -m tests.acceptance.actors produce STORE QUEUE FIRST COUNT
    python -m tests.acceptance.actors consume STORE QUEUE LOG [CONCURRENCY]
    python -m tests.acceptance.actors consume-retry STORE QUEUE LOG
    python -m tests.acceptance.actors produce-delayed STORE QUEUE COUNT DELAY
    python -m tests.acceptance.actors consume-slow REDIS_URL QUEUE LOG JOB_SECONDS LEASE

STORE is ``sqlite:<path>`` or a ``redis://`` URL. A consumer appends ``start <id>`` to LOG when
a job begins and ``done <id>`` when its function returned, before the acknowledgement, so a
consumer killed between the two leaves a job that must come back. ``consume-retry`` fails
every job's first attempt (logging ``fail <id> <attempt> <unix time>``) under a retry policy
with a 1 s backoff, and logs ``done <id> <attempt> <unix time>`` for the later ones.
SIGTERM stops a consumer cleanly: running jobs finish and are acknowledged first.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from queue import Empty
from typing import Any

import varmq

# Short, so that jobs of killed consumers come back quickly, but not so short that six
# processes queueing for SQLite's write lock on a loaded 2-CPU machine outlast it: a lease
# that expires before its ack is a legitimate redelivery, and the no-crash run counts those
# as failures.
LEASE = 4.0


def open_store(store: str) -> Any:
    if store.startswith("sqlite:"):
        import sqliteq

        return sqliteq.new(store.removeprefix("sqlite:"))
    import redisq

    return redisq.new(store)


def produce(store: str, queue: str, first: int, count: int) -> None:
    queues = open_store(store)
    handle = varmq.new_distributed_queue(queues.new_distributed_queue(queue))
    for i in range(first, first + count):
        while True:
            try:
                if handle.add({"n": i}, job_id=f"job-{i}", strict=True):
                    break
            except varmq.EnqueueError:
                pass  # storage unreachable for a moment: try again, dedup keeps the job once
            time.sleep(0.05)
    queues.close()


def consume(store: str, queue: str, log_path: str, concurrency: int) -> None:
    queues = open_store(store)
    source = queues.new_distributed_queue(queue, visibility_timeout=LEASE)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def work(job: varmq.Job[dict[str, int]]) -> None:
        # One write per line: O_APPEND keeps lines whole when the process is killed.
        os.write(fd, f"start {job.id}\n".encode())
        time.sleep(0.001)
        os.write(fd, f"done {job.id}\n".encode())

    worker = varmq.new_worker(work, concurrency, poll_interval=0.2)
    worker.with_distributed_queue(source)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    os.write(fd, b"ready\n")
    stop.wait()
    worker.stop_and_wait()
    queues.close()
    os.close(fd)


def produce_delayed(store: str, queue: str, count: int, delay: float) -> None:
    queues = open_store(store)
    handle = varmq.new_distributed_queue(queues.new_distributed_queue(queue))
    for i in range(count):
        assert handle.add({"n": i}, job_id=f"job-{i}", delay=delay)
    queues.close()


def consume_retry(store: str, queue: str, log_path: str) -> None:
    queues = open_store(store)
    source = queues.new_distributed_queue(queue, visibility_timeout=LEASE)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def work(job: varmq.Job[dict[str, int]]) -> None:
        if job.attempt == 1:
            os.write(fd, f"fail {job.id} {job.attempt} {time.time():.3f}\n".encode())
            raise RuntimeError("first attempts fail")
        os.write(fd, f"done {job.id} {job.attempt} {time.time():.3f}\n".encode())

    policy = varmq.Retry(max_attempts=3, backoff=1.0, jitter=False)
    worker = varmq.new_worker(work, 4, retry=policy, poll_interval=0.2)
    worker.with_distributed_queue(source)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    stop.wait()
    worker.stop_and_wait()
    queues.close()
    os.close(fd)


def consume_slow(url: str, queue: str, log_path: str, job_seconds: float, lease: float) -> None:
    """One job at a time, each ``job_seconds`` long, under a ``lease``-second visibility timeout,
    on redisq with short timeouts (0.5 s, no retry), so that an outage of a second or two is
    seen by every call that meets it. Logs ``start``/``done <id>``, ``err <type>: <error>`` for
    each error the worker reports on ``errs()``, and ``log <level> <message>`` for the warnings
    of the ``redisq`` and ``varmq`` loggers."""
    import logging

    import redisq

    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def line(text: str) -> None:
        os.write(fd, (text.replace("\n", " ") + "\n").encode())

    class ToLog(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            line(f"log {record.levelname} {record.getMessage()}")

    for name in ("redisq", "varmq"):
        logging.getLogger(name).addHandler(ToLog(logging.WARNING))
    queues = redisq.new(url, socket_connect_timeout=0.5, socket_timeout=0.5, retries=0)
    source = queues.new_distributed_queue(queue, visibility_timeout=lease)

    def work(job: varmq.Job[dict[str, int]]) -> None:
        line(f"start {job.id}")
        time.sleep(job_seconds)  # the job's work
        line(f"done {job.id}")

    worker = varmq.new_worker(work, 1, poll_interval=0.2)
    worker.with_distributed_queue(source)
    stop = threading.Event()

    def report_errors() -> None:
        errors = worker.errs()
        while not stop.is_set():
            try:
                error = errors.get(timeout=0.1)
            except Empty:
                continue
            line(f"err {type(error).__name__}: {error}")

    reporter = threading.Thread(target=report_errors, daemon=True)
    reporter.start()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    line("ready")
    stop.wait()
    worker.stop_and_wait()
    reporter.join()
    queues.close()
    os.close(fd)


if __name__ == "__main__":
    role, store, queue = sys.argv[1], sys.argv[2], sys.argv[3]
    if role == "produce":
        produce(store, queue, int(sys.argv[4]), int(sys.argv[5]))
    elif role == "produce-delayed":
        produce_delayed(store, queue, int(sys.argv[4]), float(sys.argv[5]))
    elif role == "consume-slow":
        consume_slow(store, queue, sys.argv[4], float(sys.argv[5]), float(sys.argv[6]))
    elif role == "consume-retry":
        consume_retry(store, queue, sys.argv[4])
    else:
        consume(store, queue, sys.argv[4], int(sys.argv[5]) if len(sys.argv) > 5 else 8)
