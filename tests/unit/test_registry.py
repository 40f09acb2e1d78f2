"""The named worker registry: varmq.get_worker, varmq.workers and stopped_retention."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

import varmq

WAIT = 10.0


@pytest.fixture
def name() -> str:
    return f"worker-{uuid.uuid4().hex[:8]}"


def test_named_worker_is_registered_when_created_with_auto_run(name: str) -> None:
    worker = varmq.new_worker(lambda job: None, name=name)
    assert worker.name == name
    assert varmq.get_worker(name) is worker
    assert varmq.workers()[name] is worker


def test_unnamed_worker_is_never_registered() -> None:
    worker = varmq.new_worker(lambda job: None)
    assert worker.name == ""
    assert all(w is not worker for w in varmq.workers().values())
    assert varmq.get_worker("") is None


def test_named_worker_with_auto_run_off_is_registered_only_on_start(name: str) -> None:
    worker = varmq.new_result_worker(lambda job: None, name=name, auto_run=False)
    assert varmq.get_worker(name) is None
    assert name not in varmq.workers()
    worker.start()
    assert varmq.get_worker(name) is worker


def test_unknown_name_gives_none() -> None:
    assert varmq.get_worker(f"nobody-{uuid.uuid4().hex}") is None


def test_workers_is_a_snapshot(name: str) -> None:
    varmq.new_worker(lambda job: None, name=name)
    snapshot = varmq.workers()
    snapshot.clear()
    assert varmq.get_worker(name) is not None


def test_stopped_worker_is_forgotten_after_its_retention_and_start_registers_it_again(
    name: str, poll: Any
) -> None:
    worker = varmq.new_worker(lambda job: None, name=name, stopped_retention=0.05)
    assert worker.stop_and_wait(WAIT)
    assert poll(lambda: varmq.get_worker(name) is None)
    assert name not in varmq.workers()
    worker.start()
    assert varmq.get_worker(name) is worker


def test_stopped_worker_stays_registered_during_its_retention(name: str) -> None:
    worker = varmq.new_worker(lambda job: None, name=name, stopped_retention=60)
    assert worker.stop_and_wait(WAIT)
    assert varmq.get_worker(name) is worker


def test_retention_zero_keeps_a_stopped_worker_registered(name: str) -> None:
    worker = varmq.new_worker(lambda job: None, name=name, stopped_retention=0)
    assert worker.stop_and_wait(WAIT)
    time.sleep(0.1)  # time passes on purpose
    assert varmq.get_worker(name) is worker
    assert varmq.workers()[name] is worker


def test_restart_cancels_the_pending_retention_removal(name: str) -> None:
    worker = varmq.new_worker(lambda job: None, name=name, stopped_retention=0.1)
    assert worker.stop_and_wait(WAIT)
    worker.restart()
    time.sleep(0.2)  # longer than the retention, on purpose
    assert varmq.get_worker(name) is worker
    assert worker.is_active


def test_paused_worker_stays_registered(name: str) -> None:
    worker = varmq.new_worker(lambda job: None, name=name, stopped_retention=0.01)
    worker.pause()
    time.sleep(0.05)  # longer than the retention, on purpose
    assert varmq.get_worker(name) is worker


def test_a_new_worker_can_take_the_name_of_a_stopped_one(name: str) -> None:
    old = varmq.new_worker(lambda job: None, name=name)
    assert old.stop_and_wait(WAIT)
    new = varmq.new_worker(lambda job: None, name=name)
    assert varmq.get_worker(name) is new


def test_a_second_live_worker_with_the_same_name_is_refused(name: str) -> None:
    first = varmq.new_worker(lambda job: None, name=name)
    second = varmq.new_worker(lambda job: None, name=name, auto_run=False)
    with pytest.raises(ValueError, match=name):
        second.start()
    assert varmq.get_worker(name) is first
    assert second.status is varmq.Status.INITIATED
