"""Acceptance: a SQLite queue reopens after the process holding it was killed mid-take.

A child process opens the file, takes a job (leasing it) and is killed with SIGKILL while it
holds the lease. The file then opens again, FIFO and priority queues alike, with every job in
it; the killed process's job comes back once its lease ran out, in its priority and place.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import sqliteq

ROOT = Path(__file__).resolve().parents[2]
LEASE = 2.0

CHILD = """
import sys, time, sqliteq
queues = sqliteq.new(sys.argv[1])
kind, name = sys.argv[2], sys.argv[3]
opener = queues.new_priority_queue if kind == "priority" else queues.new_queue
q = opener(name, visibility_timeout=float(sys.argv[4]))
taken = q.dequeue_with_ack_id()
print(taken[0].decode(), flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("kind", ["fifo", "priority"])
def test_queue_reopens_after_a_kill_and_the_killed_take_comes_back(
    kind: str, tmp_path: Path
) -> None:
    db = str(tmp_path / "jobs.db")
    queues = sqliteq.new(db)
    if kind == "priority":
        q = queues.new_priority_queue("q")
        for item, priority in [(b"b", 2), (b"a", 1), (b"c", 2), (b"z", 9)]:
            assert q.enqueue(item, priority)
    else:
        q = queues.new_queue("q")
        for item in (b"a", b"b", b"c", b"z"):
            assert q.enqueue(item)
    queues.close()

    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, db, kind, "q", str(LEASE)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "a"  # taken and leased by the child
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    killed_at = time.monotonic()

    reopened = sqliteq.new(db)
    try:
        again = reopened.new_priority_queue("q") if kind == "priority" else reopened.new_queue("q")
        # Opening takes nothing back: the killed take is still leased until its lease runs out.
        assert again.values() == [b"b", b"c", b"z"]
        deadline = killed_at + LEASE + 5.0
        while len(again) < 4:
            assert time.monotonic() < deadline, "the killed process's job never came back"
            time.sleep(0.05)  # lease time passing on purpose
        # Back in its place: first, ahead of the jobs that were behind it.
        taken = []
        while (got := again.dequeue_with_ack_id()) is not None:
            item, ack_id = got
            taken.append(item)
            assert again.acknowledge(ack_id)
        assert taken == [b"a", b"b", b"c", b"z"]
    finally:
        reopened.close()
