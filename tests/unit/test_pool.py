"""Concurrency and the thread pool: tune_pool, idle thread expiry and the minimum idle ratio.

The idle-thread count is a gauge with no wait of its own, so those tests poll it against a
deadline.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

import varmq

WAIT = 10.0
SHORT = 0.1


def fill_pool(worker: Any, g: Any, n: int) -> None:
    """Hold ``n`` jobs of ``worker`` (job function ``g.fn``) at once, so that it has ``n``
    threads, then let them end."""
    queue = worker.bind_queue()
    for i in range(n):
        queue.add(i)
    assert g.wait_started(n)
    g.open()
    assert worker.wait(WAIT)


def test_started_worker_settles_with_exactly_one_idle_thread(poll: Any) -> None:
    worker = varmq.new_worker(lambda job: None, 10)
    assert poll(lambda: worker.num_idle_workers == 1)
    time.sleep(SHORT)  # time passes on purpose: no thread is added or retired while idle
    assert worker.num_idle_workers == 1
    assert worker.num_processing == 0


def test_tune_pool_up_lets_more_jobs_run_at_once(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn, 1)
    queue = worker.bind_queue()
    for i in range(5):
        queue.add(i)
    assert g.wait_started(1)
    assert not g.wait_started(2, timeout=SHORT)
    worker.tune_pool(3)
    assert worker.num_concurrency == 3
    assert g.wait_started(3)
    assert not g.wait_started(4, timeout=SHORT)
    assert worker.num_processing == 3
    g.open()
    assert worker.wait(WAIT)
    assert g.peak == 3
    assert sorted(g.ended) == [0, 1, 2, 3, 4]


def test_tune_pool_down_limits_later_jobs_without_interrupting_running_ones(gate: Any) -> None:
    held, later = gate(), gate()

    def fn(job: varmq.Job[str]) -> str:
        return held.fn(job) if job.data.startswith("held") else later.fn(job)

    worker = varmq.new_worker(fn, 3)
    queue = worker.bind_queue()
    for i in range(3):
        queue.add(f"held{i}")
    assert held.wait_started(3)
    worker.tune_pool(1)
    assert worker.num_concurrency == 1
    for i in range(4):
        queue.add(f"later{i}")
    assert worker.num_processing == 3, "running jobs are not interrupted"
    held.open()
    assert held.wait_ended(3)
    assert later.wait_started(1)
    assert not later.wait_started(2, timeout=SHORT)
    assert worker.num_processing == 1
    later.open()
    assert worker.wait(WAIT)
    assert later.peak == 1
    assert later.ended == ["later0", "later1", "later2", "later3"]


def test_tune_pool_down_with_every_thread_busy_does_not_fail(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn, 3)
    queue = worker.bind_queue()
    for i in range(3):
        queue.add(i)
    assert g.wait_started(3)
    assert worker.num_idle_workers == 0
    worker.tune_pool(1)
    g.open()
    assert worker.wait(WAIT)
    assert worker.is_active


def test_tune_pool_to_zero_means_the_cpu_count() -> None:
    cpus = os.cpu_count() or 1
    worker = varmq.new_worker(lambda job: None, cpus + 3)
    worker.tune_pool(0)
    assert worker.num_concurrency == cpus


@pytest.mark.parametrize("n", [-3, 1.5, "4", True])
def test_tune_pool_refuses_what_is_not_a_concurrency_and_keeps_the_old_one(n: object) -> None:
    worker = varmq.new_worker(lambda job: None, 4)
    with pytest.raises((TypeError, ValueError), match=r"tune_pool\(concurrency\)"):
        worker.tune_pool(n)  # type: ignore[arg-type]
    assert worker.num_concurrency == 4
    assert worker.is_active


def test_tune_pool_to_the_same_value_raises_same_concurrency_error() -> None:
    worker = varmq.new_worker(lambda job: None, 4)
    with pytest.raises(varmq.SameConcurrencyError):
        worker.tune_pool(4)
    assert worker.num_concurrency == 4


def test_tune_pool_to_zero_when_already_at_the_cpu_count_raises_same_concurrency() -> None:
    worker = varmq.new_worker(lambda job: None, 0)
    with pytest.raises(varmq.SameConcurrencyError):
        worker.tune_pool(0)


def test_tune_pool_up_and_down_keeps_the_worker_active(recorder: Any) -> None:
    worker = varmq.new_worker(recorder.fn, 2)
    worker.tune_pool(5)
    assert worker.num_concurrency == 5
    worker.tune_pool(2)
    assert worker.num_concurrency == 2
    assert worker.is_active
    queue = worker.bind_queue()
    for i in range(10):
        queue.add(i)
    assert worker.wait(WAIT)
    assert sorted(recorder.ran) == list(range(10))


def test_idle_threads_fill_to_the_concurrency_then_expire_to_the_minimum(
    gate: Any, poll: Any
) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn, 10, idle_worker_expiry=0.3)
    fill_pool(worker, g, 10)
    assert poll(lambda: worker.num_idle_workers == 10, timeout=0.25, every=0.005)
    worker.tune_pool(3)
    assert worker.num_idle_workers >= 9, "with an expiry, tune_pool down does not trim at once"
    assert poll(lambda: worker.num_idle_workers == 1, timeout=WAIT)


@pytest.mark.parametrize(
    ("concurrency", "ratio", "minimum"),
    [(10, 10, 1), (10, 20, 2), (10, 50, 5), (4, 50, 2), (5, 30, 1), (6, 0, 1), (3, 150, 3)],
)
def test_idle_threads_expire_down_to_the_minimum_idle_ratio_and_stay_there(
    gate: Any, poll: Any, concurrency: int, ratio: int, minimum: int
) -> None:
    g = gate()
    worker = varmq.new_worker(
        g.fn, concurrency, idle_worker_expiry=0.05, min_idle_worker_ratio=ratio
    )
    fill_pool(worker, g, concurrency)
    assert poll(lambda: worker.num_idle_workers == minimum, timeout=WAIT)
    time.sleep(0.2)  # several expiry periods pass on purpose
    assert worker.num_idle_workers == minimum


def test_without_expiry_idle_threads_are_trimmed_but_one_always_stays(gate: Any, poll: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn, 6)
    fill_pool(worker, g, 6)
    assert poll(lambda: worker.num_idle_workers == 1, timeout=WAIT)
    time.sleep(0.5)  # longer than any idle grace, on purpose
    assert worker.num_idle_workers == 1
    job = worker.bind_queue().add("still works")
    assert job.wait(WAIT)


def test_without_expiry_tune_pool_down_trims_idle_threads_at_once(gate: Any, poll: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn, 10)
    fill_pool(worker, g, 10)
    assert poll(lambda: worker.num_idle_workers >= 8, timeout=0.1, every=0.002)
    worker.tune_pool(2)
    assert worker.num_idle_workers <= 2


def test_stopped_worker_has_no_threads_left(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn, 5, idle_worker_expiry=10)
    fill_pool(worker, g, 5)
    assert worker.stop_and_wait(WAIT)
    assert worker.num_idle_workers == 0
    assert worker.num_processing == 0
