"""A write lock held longer than a lease, by another process: the running job keeps its lease.

Real processes: a worker runs a 12 s job under a 6 s lease, renewed by varmq; another process
holds the file's write lock for 6.5 s meanwhile, so no renewal can be written for longer than
the lease; a second worker polls the same queue all along. The job must run once.
"""

from __future__ import annotations

import signal
import subprocess
from collections import Counter
from pathlib import Path

import pytest

import sqliteq
from tests.adapters.sqliteq.conftest import read_until, spawn_actor

# Run alone by the test command:
# real processes against a lease deadline with half a second to spare.
pytestmark = pytest.mark.serial


def stop(process: subprocess.Popen[str]) -> str:
    process.send_signal(signal.SIGTERM)
    _, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    return err


def test_a_write_lock_held_longer_than_the_lease_does_not_hand_the_job_out_again(
    tmp_path: Path,
) -> None:
    path, log = tmp_path / "jobs.db", tmp_path / "runs.log"
    with sqliteq.new(path) as store:
        store.new_distributed_queue("work").enqueue(
            b'{"id": "long-job", "status": "Created", "data": null}'
        )
    first = spawn_actor("work", str(path), str(log), "6", "12")
    read_until(first, "ready")
    started = read_until(first, "start long-job")
    second = spawn_actor("work", str(path), str(log), "6", "12")
    try:
        read_until(second, "ready")
        locker = spawn_actor("lock", str(path), "6.5")
        read_until(locker, "locked")
        read_until(locker, "unlocked")
        assert locker.wait(timeout=30) == 0
        assert read_until(first, "done long-job").split()[2] == started.split()[2]
    finally:
        stop(second)
        stop(first)
    runs = Counter(
        line.split()[1] for line in log.read_text().splitlines() if line.startswith("start")
    )
    assert runs == Counter({"long-job": 1})
