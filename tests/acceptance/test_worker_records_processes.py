"""Workers seen from anywhere, with real processes (sqliteq and redisq): a consumer process's
worker is listed by ``store.workers()`` in the test process, with its host, pid and queue; once
SIGKILLed it shows as gone (``alive=False``, still listed) within its expiry, and never as alive
after that; a consumer stopped with SIGTERM removes its record before it exits. The actors are
tests/acceptance/worker_record_actors.py (a refresh every 0.2 s, gone after 1 s)."""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import varmq
from tests.acceptance.actors import open_store
from tests.acceptance.process_tools import STORES, expect_line, spawn, store_url
from tests.acceptance.worker_record_actors import EXPIRES_AFTER, REFRESH

ACTOR = "tests.acceptance.worker_record_actors"
SLACK = 2.0
"""Seconds beyond the expiry the test allows a busy machine (a refresh late, a slow read)."""


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return store_url(request, tmp_path)


def _named(queues: Any, name: str) -> varmq.WorkerInfo | None:
    found = [w for w in queues.workers() if w.name == name]
    assert len(found) <= 1, found
    return found[0] if found else None


def _until(what: str, seconds: float, check: Any) -> Any:
    """Poll ``check()`` until it gives something truthy (no event crosses processes here)."""
    deadline = time.monotonic() + seconds
    while True:
        found = check()
        if found:
            return found
        assert time.monotonic() < deadline, f"{what}: not within {seconds} s"
        time.sleep(0.02)


def test_a_killed_consumer_shows_as_gone_within_its_expiry_and_a_stopped_one_disappears(
    store: str, processes: list[subprocess.Popen[str]], request: pytest.FixtureRequest
) -> None:
    tag = f"{request.node.callspec.id}-{time.time_ns()}"
    queue, killed_name, stopped_name = f"records-{tag}", f"killed-{tag}", f"stopped-{tag}"
    queues = open_store(store)
    try:
        killed = spawn(ACTOR, "consume", store, queue, killed_name)
        stopped = spawn(ACTOR, "consume", store, queue, stopped_name)
        processes.extend([killed, stopped])
        expect_line(killed, "ready")
        expect_line(stopped, "ready")
        seen = _until("registration", 10, lambda: _named(queues, killed_name))
        assert _until("registration", 10, lambda: _named(queues, stopped_name))
        assert seen.alive and seen.pid == killed.pid and seen.host == socket.gethostname()
        assert seen.queues == (queue,) and seen.concurrency == 2

        stopped.send_signal(signal.SIGTERM)
        assert stopped.wait(timeout=30) == 0
        assert _named(queues, stopped_name) is None  # removed before the process exited

        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=10)
        died = time.monotonic()
        gone = _until(
            "the killed worker shown as gone",
            EXPIRES_AFTER + REFRESH + SLACK,
            lambda: (w := _named(queues, killed_name)) is not None and not w.alive and w,
        )
        assert time.monotonic() - died <= EXPIRES_AFTER + REFRESH + SLACK
        assert gone.pid == killed.pid
        for _ in range(5):  # and it stays gone: never alive again
            info = _named(queues, killed_name)
            assert info is not None and not info.alive
            time.sleep(REFRESH)
    finally:
        queues.close()
