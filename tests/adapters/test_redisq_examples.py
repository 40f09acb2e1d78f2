"""The multi-host example (examples/redis_distributed/) against the session's redis-server.

The producer and the consumer run as separate processes, as on separate hosts; the test checks
that every job the producer added ran exactly once, and that a consumer stops cleanly on SIGTERM.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "redis_distributed"
TIMEOUT = 60.0


def _run(script: str, *args: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    return subprocess.Popen(
        [sys.executable, str(EXAMPLE / script), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_ready(consumer: subprocess.Popen[str]) -> None:
    assert consumer.stdout is not None
    line = consumer.stdout.readline()  # blocks until the consumer listens (or exits)
    assert line.strip() == "ready", f"consumer said {line!r}; stderr: {consumer.stderr}"


def test_consumer_runs_every_job_the_producer_added_exactly_once(
    redis_db: str, tmp_path: Path
) -> None:
    queue, n = f"example-{uuid.uuid4().hex}", 200
    logs = [tmp_path / f"consumer-{i}.out" for i in range(2)]
    consumers = []
    for log in logs:
        args = [str(EXAMPLE / "consumer.py"), "--url", redis_db, "--queue", queue]
        with log.open("w") as out:
            consumer = subprocess.Popen(
                [sys.executable, *args],
                cwd=ROOT,
                env=dict(os.environ, PYTHONUNBUFFERED="1"),
                stdout=out,
                stderr=subprocess.PIPE,
                text=True,
            )
        consumers.append(consumer)
    try:
        for log in logs:
            _wait_for_line(log, "ready")
        producer = subprocess.run(
            [sys.executable, str(EXAMPLE / "producer.py"), "--url", redis_db, "--queue", queue,
             "-n", str(n)],
            cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT, check=False,
        )  # fmt: skip
        assert (producer.returncode, producer.stdout.strip()) == (0, f"added {n}"), producer.stderr
        deadline = time.monotonic() + TIMEOUT
        while sum(_done(log) for log in logs) < n:  # however the two shared the jobs
            assert time.monotonic() < deadline, "the consumers did not finish the jobs"
            time.sleep(0.05)
    finally:
        for consumer in consumers:
            consumer.send_signal(signal.SIGTERM)
        for consumer in consumers:
            _, err = consumer.communicate(timeout=TIMEOUT)
            assert consumer.returncode == 0, err
    done: list[int] = []
    for log in logs:
        lines = log.read_text().splitlines()
        numbers = [int(line.split()[1]) for line in lines if line.startswith("done ")]
        assert lines[-1] == f"processed {len(numbers)}"
        done += numbers
    assert sorted(done) == list(range(n))


def _wait_for_line(log: Path, text: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while text not in log.read_text().splitlines():
        assert time.monotonic() < deadline, f"{log.name} never said {text!r}"
        time.sleep(0.02)


def _done(log: Path) -> int:
    return sum(1 for line in log.read_text().splitlines() if line.startswith("done "))


def test_consumer_stops_on_sigterm_and_reports_what_it_processed(redis_db: str) -> None:
    queue = f"example-{uuid.uuid4().hex}"
    consumer = _run("consumer.py", "--url", redis_db, "--queue", queue)
    _wait_for_ready(consumer)
    producer = subprocess.run(
        [sys.executable, str(EXAMPLE / "producer.py"), "--url", redis_db, "--queue", queue,
         "-n", "5"],
        cwd=ROOT, capture_output=True, text=True, timeout=TIMEOUT, check=False,
    )  # fmt: skip
    assert producer.returncode == 0, producer.stderr
    assert consumer.stdout is not None
    seen = [consumer.stdout.readline().strip() for _ in range(5)]
    assert sorted(seen) == [f"done {i}" for i in range(5)]
    consumer.send_signal(signal.SIGTERM)
    out, err = consumer.communicate(timeout=TIMEOUT)
    assert consumer.returncode == 0, err
    assert out.splitlines()[-1] == "processed 5"


def test_examples_are_marked_as_needing_redis() -> None:
    for script in ("producer.py", "consumer.py"):
        first = (EXAMPLE / script).read_text(encoding="utf-8").splitlines()[0]
        assert first == "# example: requires redis"
