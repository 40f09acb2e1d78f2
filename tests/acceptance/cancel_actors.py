"""Consumer processes of the cancel-by-id acceptance test, run as ``python -m``.

    python -m tests.acceptance.cancel_actors consume STORE QUEUE LOG SEED

STORE is ``sqlite:<path>`` or a ``redis://`` URL. The consumer opens QUEUE with
``keep_results=KEEP`` and runs a plain worker of concurrency 2 under ``RETRY``. Its job function
appends ``start <id> <monotonic> <attempt> <pid>`` to LOG before it does anything else, sleeps
0-30 ms, then appends ``end <id> <monotonic> <attempt> ok|raise`` and returns or, for about
one run in ten, raises ``ValueError``. Whether a run raises and how long it sleeps are drawn
from SEED, the job id and the attempt, so a failing run can be replayed with its seed.

Each line is one ``os.write`` to a file opened with ``O_APPEND``: whole lines, in the kernel's
page cache as soon as the call returned, so another process reading the file sees them at
once (no fsync: nothing here survives a machine crash, and nothing needs to).
``time.monotonic()`` is ``CLOCK_MONOTONIC``, one clock for the whole system on Linux: the
test compares these times with the times it took in its own process.

Errors other than the ``ValueError`` on purpose (the worker's own: a failed acknowledgement, a
storage error) are written to stderr. The consumer prints ``ready`` (one flushed line) once its
worker is bound, and stops cleanly on SIGTERM.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from typing import Any

import varmq
from tests.acceptance.actors import open_store

KEEP = 600.0
"""``keep_results`` of every process: records outlive the test."""
LEASE = 4.0
"""``visibility_timeout``: renewals (where a worker hears of a cancel) every third of it. Not
shorter: on a loaded 2-CPU machine a lease that runs out is a legitimate redelivery, which
this test would count as a job started twice without a reason."""
CONCURRENCY = 2
RETRY = varmq.Retry(max_attempts=2, backoff=0.01)
RAISE_RATE = 0.1
"""Share of runs that raise ``ValueError``."""
MAX_SLEEP = 0.03


def open_queue(store: str, queue: str) -> tuple[Any, Any]:
    """The store and its distributed queue ``queue``, with records."""
    queues = open_store(store)
    return queues, queues.new_distributed_queue(queue, keep_results=KEEP, visibility_timeout=LEASE)


def run_of(seed: str, job_id: str, attempt: int) -> tuple[float, bool]:
    """How long run ``attempt`` of ``job_id`` sleeps, and whether it raises."""
    draw = random.Random(f"{seed}:{job_id}:{attempt}")
    return draw.uniform(0.0, MAX_SLEEP), draw.random() < RAISE_RATE


def consume(store: str, queue: str, log_path: str, seed: str) -> None:
    queues, q = open_queue(store, queue)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()

    def work(job: varmq.Job[dict[str, int]]) -> None:
        os.write(fd, f"start {job.id} {time.monotonic():.6f} {job.attempt} {pid}\n".encode())
        seconds, raises = run_of(seed, job.id, job.attempt)
        time.sleep(seconds)  # the job's work
        end = "raise" if raises else "ok"
        os.write(fd, f"end {job.id} {time.monotonic():.6f} {job.attempt} {end}\n".encode())
        if raises:
            raise ValueError(f"run {job.attempt} of {job.id} failed on purpose")

    def on_error(_worker: Any, exc: BaseException, job: varmq.FailedJob | None) -> None:
        if job is None or not isinstance(exc, ValueError):  # not one of the failures on purpose
            sys.stderr.write(f"consumer {pid}: {exc!r} (job {job})\n")

    worker = varmq.new_worker(
        work,
        CONCURRENCY,
        retry=RETRY,
        poll_interval=0.2,
        log_failures=False,  # the failures on purpose are in LOG
        error_handler=on_error,
    )
    worker.with_distributed_queue(q)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    stop.wait()
    worker.stop_and_wait()
    queues.close()
    os.close(fd)


if __name__ == "__main__":
    if sys.argv[1] != "consume":
        raise SystemExit(f"unknown role {sys.argv[1]!r}")
    consume(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5])
