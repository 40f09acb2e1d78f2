"""Leases on the host's clock: a process whose wall clock is wrong takes over nobody's jobs.

Due times stay on wall time; lease deadlines are on the host-wide boot-time clock, tagged with
the boot id, so leases of another boot count as expired. The process tests run real consumer
processes (``skewed_actor.py``) on one file.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

import sqliteq
from sqliteq import _schema, _sql
from sqliteq._clock import host_lease_clock
from tests.adapters.sqliteq.conftest import undo_version_6

# Run alone by the test command: real processes whose leases run against the clock.
pytestmark = pytest.mark.serial

ACTOR = Path(__file__).with_name("skewed_actor.py")
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")
linux_only = pytest.mark.skipif(not BOOT_ID.exists(), reason="needs a Linux boot id")


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}


def _actor(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, str(ACTOR), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(),
    )


def _runs(log: Path) -> Counter[str]:
    return Counter(line.split("\t")[0] for line in log.read_text().splitlines())


@linux_only
def test_a_consumer_whose_wall_clock_is_60_s_ahead_takes_over_no_running_job(
    tmp_path: Path,
) -> None:
    path, log = tmp_path / "jobs.db", tmp_path / "runs.log"
    with sqliteq.new(path) as store:
        q = store.new_queue("work")
        jobs = [f"job-{i}" for i in range(6)]
        for job in jobs:
            assert q.enqueue(job)
    holder = _actor("hold", str(path), str(log), "0", "3", "3")  # 3 jobs, 3 s each, 5 s lease
    assert holder.stdout is not None
    assert holder.stdout.readline().strip() == "taken"
    skewed = _actor("drain", str(path), str(log), "60")
    _, err = skewed.communicate(timeout=60)
    assert skewed.returncode == 0, err
    _, err = holder.communicate(timeout=60)
    assert holder.returncode == 0, err
    assert _runs(log) == Counter(dict.fromkeys(jobs, 1))  # every job ran once


def _leased_file(path: Path, lease_until: int, lease_clock: str | None) -> None:
    """A file with one job leased until ``lease_until``, its leases on ``lease_clock``."""
    with sqliteq.new(path) as store:
        store.new_queue("work").enqueue(b"job")
    conn = sqlite3.connect(path)
    conn.execute(
        "UPDATE jobs SET state = 'leased', lease_token = 'old', lease_until = ?", (lease_until,)
    )
    if lease_clock is None:  # as a version-3 sqliteq left it
        undo_version_6(conn)
        conn.execute("DROP TABLE host")
        conn.execute("DROP TABLE topic_bindings")  # version 5's
        conn.execute(_sql.SET_USER_VERSION.format(value=3))
    else:
        conn.execute("UPDATE host SET lease_clock = ?", (lease_clock,))
    conn.commit()
    conn.close()


@linux_only
def test_new_files_keep_leases_on_the_boot_clock_of_this_boot(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    sqliteq.new(path).close()
    conn = sqlite3.connect(path)
    (clock,) = conn.execute("SELECT lease_clock FROM host").fetchone()
    conn.close()
    assert clock.endswith(":" + BOOT_ID.read_text().strip())


@linux_only
def test_a_version_3_file_keeps_the_time_its_wall_clock_leases_had_left(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    _leased_file(path, time.time_ns() // 1_000_000 + 60_000, None)
    with sqliteq.new(path) as store:
        q = store.new_queue("work")
        assert q.dequeue_with_ack_id() is None  # still leased
        assert q.stats()["in_flight"] == 1
        assert q.extend_lease("old") is True
    conn = sqlite3.connect(path)
    (until,) = conn.execute("SELECT lease_until FROM jobs").fetchone()
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    conn.close()
    assert version == _schema.SCHEMA_VERSION == 7
    left = until - host_lease_clock()[1]()
    assert 20_000 < left <= 30_000  # renewed for the default 30 s lease, on the host clock


@linux_only
def test_a_lease_from_another_boot_has_expired(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    far_ahead = host_lease_clock()[1]() + 3_600_000
    _leased_file(path, far_ahead, "boottime:00000000-0000-0000-0000-000000000000")
    with sqliteq.new(path) as store:
        q = store.new_queue("work")
        assert q.extend_lease("old") is False
        taken = q.dequeue_batch_with_attempts(1)
        assert [(data, attempts) for data, _, attempts in taken] == [(b"job", 1)]
