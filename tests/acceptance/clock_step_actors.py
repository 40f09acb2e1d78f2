"""The consumer process of the clock-step acceptance test, run as ``python -m``.

    python -m tests.acceptance.clock_step_actors consume STORE QUEUE NAME LOG OFFSET_FILE

STORE is ``sqlite:<path>`` or a ``redis://`` URL. ``consume`` declares the schedule NAME
(``every=1``) on QUEUE (``keep_results=KEEP``) and runs its occurrences, appending
``run <job id> <real time> <process wall time> <pid>`` to LOG for each (times in Unix
seconds). It prints ``ready`` on stdout once its worker runs; SIGTERM stops it cleanly.

The process's wall clock is stepped by OFFSET_FILE: it holds a number of seconds (``-10``: the
clock was set back 10 s), re-read every ``REREAD`` seconds; each change seen is logged as
``step <offset> <real time> <pid>``. A system clock step moves the wall clock of every reader of
the host and never ``CLOCK_MONOTONIC``, so before varmq, sqliteq or redisq is imported,
``time.time`` and ``time.time_ns`` are replaced with the real ones plus the offset, and the
monotonic clocks (``time.monotonic``, the waits of ``threading``, sqliteq's lease clock on
``CLOCK_BOOTTIME``) are left alone. Every wall-clock reader of the library goes through these
two: the timer's ``time.time()`` (``varmq/engine/timer.py``), the job model's
``from time import time`` (bound after the patch), sqliteq's ``wall_clock_ms``
(``time.time_ns()``, ``adapters/sqliteq/_clock.py``). ``datetime.datetime.now`` reads the
system clock in C and does not follow; the library calls it only to check a ``cron=``
expression (and in its CLI), and this schedule is ``every=``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from typing import Any

KEEP = 3600.0
"""``keep_results`` of the queue, in seconds: records outlive the test."""
LEASE = 4.0
"""``visibility_timeout``."""
REREAD = 0.02
"""Seconds between two reads of the offset file."""

real_time = time.time
real_time_ns = time.time_ns
_offset_ns = 0  # the current step, in ns: one int, read and replaced whole


def stepped_time() -> float:
    return real_time() + _offset_ns / 1e9


def stepped_time_ns() -> int:
    return real_time_ns() + _offset_ns


def _read_offset(path: str) -> int:
    try:
        with open(path, encoding="ascii") as fh:
            text = fh.read().strip()
    except OSError:
        return _offset_ns  # the file is being replaced: keep the last offset
    return round(float(text) * 1e9) if text else _offset_ns


def _step_clock(path: str, log: int) -> None:
    """Make the process's wall clock the real one plus OFFSET_FILE's seconds, from now on."""
    global _offset_ns
    if any(name in sys.modules for name in ("varmq", "sqliteq", "redisq")):
        raise RuntimeError("the clock must be stepped before the library is imported")
    _offset_ns = _read_offset(path)
    time.time = stepped_time
    time.time_ns = stepped_time_ns
    pid = os.getpid()

    def follow() -> None:
        global _offset_ns
        while True:
            offset = _read_offset(path)
            if offset != _offset_ns:
                _offset_ns = offset
                os.write(log, f"step {offset / 1e9:g} {real_time():.6f} {pid}\n".encode())
            time.sleep(REREAD)  # on the monotonic clock: a step never moves it

    threading.Thread(target=follow, name="clock-step", daemon=True).start()


def consume(store: str, queue: str, name: str, log_path: str, offset_path: str) -> None:
    log = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    _step_clock(offset_path, log)
    import varmq  # only now: every wall-clock reader binds the stepped clock
    from tests.acceptance.actors import open_store

    queues = open_store(store)
    pid = os.getpid()

    def work(job: varmq.Job[Any]) -> None:
        line = f"run {job.id} {real_time():.6f} {time.time():.6f} {pid}\n"
        os.write(log, line.encode())  # one write: whole lines

    worker = varmq.new_worker(work, 2)  # the default poll_interval (1 s)
    handle = worker.with_distributed_queue(
        queues.new_distributed_queue(queue, keep_results=KEEP, visibility_timeout=LEASE)
    )
    worker.schedule(name, every=1, queue=handle)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("ready", flush=True)
    stop.wait()
    worker.stop_and_wait()
    queues.close()
    os.close(log)


if __name__ == "__main__":
    command, args = sys.argv[1], sys.argv[2:]
    if command != "consume":
        raise SystemExit(f"unknown command {command!r}")
    consume(*args[:5])
