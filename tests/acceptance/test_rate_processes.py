"""A queue's ``rate_limit`` held across real consumer processes (sqliteq and redisq): three
consumers of one queue, every start logged with its time; no window of the limit's length sees
more starts than the limit, every job runs once, and the limit is used (the drain takes about as
long as the limit says, not much longer). The actors are tests/acceptance/rate_actors.py."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.acceptance.actors import open_store
from tests.acceptance.process_tools import STORES, expect_line, spawn, store_url
from tests.support.windows import most_in_any_window

COUNT, SECONDS = 10, 0.5
"""The limit: 10 starts in any half second."""
JOBS = 60
CONSUMERS = 3
SLACK = 0.15
"""A start is counted at its take and logged when its function begins, later by a thread's
wake-up, more on a busy machine: windows this much shorter are checked (the conformance suite
checks the window exactly, on a fake clock)."""


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request, tmp_path)


def test_three_consumers_together_keep_to_the_queues_rate_limit(
    store: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[str]],
    request: pytest.FixtureRequest,
) -> None:
    queue, log = f"limited-{request.node.callspec.id}-{time.time_ns()}", tmp_path / "starts.log"
    queues = open_store(store)
    handle = queues.new_distributed_queue(queue, rate_limit=(COUNT, SECONDS))  # stored first
    try:
        for _ in range(CONSUMERS):
            consumer = spawn("tests.acceptance.rate_actors", "consume", store, queue, str(log))
            processes.append(consumer)
            expect_line(consumer, "ready")
        began = time.monotonic()
        for i in range(JOBS):
            assert handle.enqueue(f'{{"id":"","status":"Created","data":{i}}}'.encode())
        deadline = time.monotonic() + 60
        lines: list[str] = []
        while len(lines) < JOBS:
            assert time.monotonic() < deadline, f"{len(lines)} of {JOBS} jobs ran in 60 s"
            lines = log.read_text().splitlines() if log.exists() else []
            time.sleep(0.05)  # polling a file the consumers append to: no event to wait on
        for consumer in processes:
            consumer.send_signal(signal.SIGTERM)
        for consumer in processes:
            assert consumer.wait(timeout=30) == 0
    finally:
        queues.close()
    runs = Counter(line.split()[0] for line in lines)
    assert sorted(runs) == sorted(str(i) for i in range(JOBS)) and set(runs.values()) == {1}
    starts = [float(line.split()[1]) for line in lines]
    assert most_in_any_window(starts, SECONDS - SLACK) <= COUNT
    assert len({line.split()[2] for line in lines}) > 1  # shared among the consumers
    # 60 jobs at 10 per half second: the last starts about 2.5 s after the first could.
    assert max(starts) - began < (JOBS / COUNT - 1) * SECONDS + 2.0
