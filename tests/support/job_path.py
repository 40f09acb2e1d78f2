"""The files one job passes through, measured by tracing a real run: ``python -m
tests.support.job_path`` prints them.

A producer process adds one job to a sqliteq distributed queue; a consumer process, already
running and idle, is woken by it, takes it under a lease, runs it (long enough for one lease
renewal) and acknowledges it. Each process records, per thread, every library file (``varmq/``,
``adapters/``; ``varmq/testing`` left out) in which a Python function was called while the job
went through, from the add to the acknowledgement; a job of each run beforehand, untraced,
makes sure that nothing is counted that only a first job pays (imports, connections).

The consumer's threads: the worker thread that takes, runs and acknowledges
(``worker-``), the queue's lease renewal thread (``leases``) and the file's watcher thread that
hears the add (``sqliteq:watch``); the timer thread, which polls on its own schedule whether
or not a job comes, is left out.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The threads of a consumer that carry the job, by the start of their names.
CONSUMER_THREADS = {
    "worker": "varmq:path:worker-",
    "renewal": "varmq:path:leases",
    "wake": "sqliteq:watch",
}
WAIT = 30.0

_recording = threading.Event()
_seen: dict[str, set[str]] = {}
_seen_lock = threading.Lock()


def _library(filename: str) -> str | None:
    try:
        relative = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    parts = relative.parts
    if parts[0] == "adapters" or (parts[0] == "varmq" and parts[1:2] != ("testing",)):
        return relative.as_posix()
    return None


def _profile(frame: FrameType, event: str, arg: Any) -> None:
    if event != "call" or not _recording.is_set():
        return
    found = _library(frame.f_code.co_filename)
    if found is not None:
        name = threading.current_thread().name
        with _seen_lock:
            _seen.setdefault(name, set()).add(found)


def _trace() -> None:
    sys.setprofile(_profile)
    threading.setprofile(_profile)


def _report() -> None:
    with _seen_lock:
        print(json.dumps({name: sorted(files) for name, files in _seen.items()}), flush=True)


def producer(path: str) -> None:
    """Add one job (traced) after another (not)."""
    import sqliteq
    import varmq

    _trace()
    store = sqliteq.new(path)
    queue = varmq.new_distributed_queue(store.new_distributed_queue("jobs"))
    assert queue.add({"n": 0}, job_id="warm")
    _recording.set()
    assert queue.add({"n": 1}, job_id="job-1")
    _recording.clear()
    _report()
    store.close()


def consumer(path: str) -> None:
    """Run the warm-up job, say so, record while the next job runs, report."""
    import sqliteq
    import varmq

    _trace()

    def run(job: varmq.Job[Any]) -> None:
        if job.id == "job-1":
            time.sleep(0.7)  # past one renewal of the 1.5 s lease (every 0.5 s)

    store = sqliteq.new(path)
    worker = varmq.new_worker(run, 1, name="path")
    worker.with_distributed_queue(store.new_distributed_queue("jobs", visibility_timeout=1.5))
    deadline = time.monotonic() + WAIT
    while worker.metrics.completed < 1:  # the warm-up job the parent added first
        assert time.monotonic() < deadline, "the warm-up job did not run"
        time.sleep(0.01)
    assert worker.wait(WAIT)  # its acknowledgement sent
    _recording.set()
    print("recording", flush=True)
    while worker.metrics.completed < 2:
        assert time.monotonic() < deadline, "the traced job did not run"
        time.sleep(0.01)
    assert worker.wait(WAIT)
    _recording.clear()
    _report()
    worker.stop_and_wait(WAIT)
    store.close()


def _child(role: str, path: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "adapters")])}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.job_path", role, path],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        text=True,
    )


def measure() -> dict[str, dict[str, list[str]]]:
    """Trace one job through a producer and a consumer process; the files of each, by thread."""
    import sqliteq
    import varmq

    with tempfile.TemporaryDirectory() as folder:
        path = str(Path(folder) / "jobs.db")
        store = sqliteq.new(path)
        warm = varmq.new_distributed_queue(store.new_distributed_queue("jobs"))
        assert warm.add({"n": 0}, job_id="warm-up")
        consumer_process = _child("consumer", path)
        try:
            assert consumer_process.stdout is not None
            assert consumer_process.stdout.readline().strip() == "recording"
            producer_process = _child("producer", path)
            made, _ = producer_process.communicate(timeout=WAIT)
            ran, _ = consumer_process.communicate(timeout=WAIT)
        finally:
            consumer_process.kill()
            store.close()
    return {"producer": json.loads(made), "consumer": json.loads(ran)}


def paths(measured: dict[str, dict[str, list[str]]]) -> dict[str, list[str]]:
    """The files of the producer's add, and of the consumer's job by the threads that carry it."""
    found = {"producer": sorted({f for files in measured["producer"].values() for f in files})}
    consumer: set[str] = set()
    for segment, prefix in CONSUMER_THREADS.items():
        files = {
            f for name, fs in measured["consumer"].items() if name.startswith(prefix) for f in fs
        }
        found[segment] = sorted(files)
        consumer |= files
    found["consumer"] = sorted(consumer)
    return found


def main() -> None:
    for segment, files in paths(measure()).items():
        print(f"{segment}: {len(files)} files")
        for file in files:
            print(f"  {file}")


if __name__ == "__main__":
    if len(sys.argv) == 3:
        {"producer": producer, "consumer": consumer}[sys.argv[1]](sys.argv[2])
    else:
        main()
