"""The processes of the schedule acceptance test, run as ``python -m``.

    python -m tests.acceptance.schedule_actors schedule STORE QUEUE NAME LOG
    python -m tests.acceptance.schedule_actors schedule-pruned STORE QUEUE NAME EVERY AT LOG
    python -m tests.acceptance.schedule_actors fill STORE QUEUE NAME EVERY RATE LOG

STORE is ``sqlite:<path>`` or a ``redis://`` URL. ``schedule`` declares the schedule NAME
(``every=1``) on QUEUE, which keeps job records (``keep_results``), and runs its occurrences,
appending ``run <job id> <pid>`` to LOG for each. It prints ``ready`` on stdout once its worker
runs; SIGTERM stops it cleanly (running jobs finish and are settled first).

``schedule-pruned`` and ``fill`` open QUEUE with records kept an hour but at most
``keep_results_limit=5`` of them (:data:`PRUNED_KEEP`, :data:`PRUNED_LIMIT`), so that other
jobs ending prune an occurrence's record long before it expires. ``schedule-pruned`` runs every
job of QUEUE, appending ``run <job id> <pid> <attempt>`` to LOG for each, prints ``ready``, and
declares the schedule NAME (``every=EVERY`` seconds) at the Unix time AT (at once when it is
past), then appends ``declared <pid> <unix time>``. ``fill`` prints ``ready`` and adds jobs
``fill-<n>`` at RATE a second; at 0.9 s past each occurrence of NAME it reads that occurrence's
record and appends ``probe <job id> <state, or none>`` to LOG, and when stopped
``filled <count>``. SIGTERM stops both cleanly.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

import varmq
from tests.acceptance.actors import open_store
from varmq.api.schedules import occurrence_id

KEEP = 300.0  # keep_results of every queue here, in seconds
LEASE = 2.0  # visibility_timeout: a killed consumer's jobs come back this soon
PRUNED_KEEP = 3600.0  # keep_results of the queues of schedule-pruned and fill
PRUNED_LIMIT = 5  # their keep_results_limit: five other ends prune an occurrence's record
PROBE_AFTER = 0.9  # fill reads an occurrence's record this long after its time


def _serve(worker: Any) -> None:
    """Say ``ready`` and run until SIGTERM, then stop ``worker`` cleanly."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    stop.wait()
    worker.stop_and_wait()


def schedule(store: str, queue: str, name: str, log_path: str) -> None:
    queues = open_store(store)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()

    def work(job: varmq.Job[Any]) -> None:
        os.write(fd, f"run {job.id} {pid}\n".encode())  # one write: whole lines under a kill

    worker = varmq.new_worker(work, 2, poll_interval=0.2)
    handle = worker.with_distributed_queue(
        queues.new_distributed_queue(queue, keep_results=KEEP, visibility_timeout=LEASE)
    )
    worker.schedule(name, every=1, data={"from": pid}, queue=handle)
    _serve(worker)
    queues.close()
    os.close(fd)


def _pruned_queue(queues: Any, queue: str) -> Any:
    return queues.new_distributed_queue(
        queue, keep_results=PRUNED_KEEP, keep_results_limit=PRUNED_LIMIT, visibility_timeout=LEASE
    )


def schedule_pruned(store: str, queue: str, name: str, every: float, at: float, log: str) -> None:
    queues = open_store(store)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    pid = os.getpid()

    def work(job: varmq.Job[Any]) -> None:
        os.write(fd, f"run {job.id} {pid} {job.attempt}\n".encode())  # one write: whole lines

    worker = varmq.new_worker(work, 2, poll_interval=0.2)
    handle = worker.with_distributed_queue(_pruned_queue(queues, queue))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    if not stop.wait(max(0.0, at - time.time())):
        worker.schedule(name, every=every, data={"from": pid}, queue=handle)
        os.write(fd, f"declared {pid} {time.time():.3f}\n".encode())
        stop.wait()
    worker.stop_and_wait()
    queues.close()
    os.close(fd)


def fill(store: str, queue: str, name: str, every: float, rate: float, log: str) -> None:
    queues = open_store(store)
    source = _pruned_queue(queues, queue)
    handle = varmq.new_distributed_queue(source)
    fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    started, added = time.monotonic(), 0
    occurrence = (int(time.time() // every) + 1) * every  # the next one to probe
    while not stop.is_set():
        if time.time() >= occurrence + PROBE_AFTER:
            job_id = occurrence_id(name, occurrence)
            try:
                record = source.job_record(job_id)
                state = "none" if record is None else record["state"]
            except Exception as exc:  # storage unreachable for a moment: say so, go on
                state = f"error:{type(exc).__name__}"
            os.write(fd, f"probe {job_id} {state}\n".encode())
            occurrence += every
            while time.time() >= occurrence + every + PROBE_AFTER:
                occurrence += every  # fell behind: probe the latest only
        while added < (time.monotonic() - started) * rate:
            try:
                handle.add({"n": added}, job_id=f"fill-{added}", strict=True)
            except varmq.EnqueueError:
                break  # storage unreachable for a moment: try again on the next round
            added += 1
        stop.wait(1.0 / rate)
    os.write(fd, f"filled {added}\n".encode())
    queues.close()
    os.close(fd)


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command == "schedule":
        schedule(args[0], args[1], args[2], args[3])
    elif command == "schedule-pruned":
        schedule_pruned(args[0], args[1], args[2], float(args[3]), float(args[4]), args[5])
    elif command == "fill":
        fill(args[0], args[1], args[2], float(args[3]), float(args[4]), args[5])
    else:
        raise SystemExit(f"unknown command {command!r}")
