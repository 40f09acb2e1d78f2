"""``worker.bind_topic``: a worker runs a job per matching message, with its concurrency,
retries, dead letters, metrics, pause and stop, as for any queue."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest

import varmq
from tests.unit.conftest import Gate, Recorder

WAIT = 10.0
FAST = varmq.Retry(max_attempts=3, backoff=0.01, multiplier=1.0, jitter=False)


def test_each_matching_message_becomes_a_job_with_its_topic_and_message_id() -> None:
    topics = varmq.new_topics()
    seen: list[tuple[str, Any, str, str | None, int]] = []
    lock = threading.Lock()

    def record(job: varmq.Job[Any]) -> None:
        assert isinstance(job, varmq.TopicJob)
        with lock:
            seen.append((job.id, job.data, job.topic, job.message_id, job.attempt))

    worker = varmq.new_worker(record, 2, job_id_generator=lambda: "generated")
    handle = worker.bind_topic(topics, "orders.*.created")
    assert isinstance(handle, varmq.TopicQueue)
    assert (handle.worker, handle.topics, handle.pattern) == (worker, topics, "orders.*.created")
    assert handle.name == "topic:orders.*.created" and handle.active
    assert topics.publish("orders.eu.created", {"n": 1}, message_id="o-1") == 1
    assert topics.publish("orders.us.created", {"n": 2}) == 1
    assert topics.publish("orders.eu.cancelled", {"n": 3}) == 0
    assert worker.wait(WAIT)
    assert sorted(seen, key=str) == sorted(
        [
            ("o-1", {"n": 1}, "orders.eu.created", "o-1", 1),
            ("generated", {"n": 2}, "orders.us.created", None, 1),
        ],
        key=str,
    )
    m = worker.metrics
    assert (m.submitted, m.completed, m.successful, m.dropped) == (2, 2, 2, 0)
    assert handle.stats()["taken"] == 2 and len(handle) == 0


def test_the_worker_runs_at_most_its_concurrency_of_topic_jobs_at_once(
    gate: Callable[[], Gate],
) -> None:
    g = gate()
    topics = varmq.new_topics()
    worker = varmq.new_worker(g.fn, 3)
    handle = worker.bind_topic(topics, "#")
    for i in range(10):
        topics.publish("work", i)
    assert g.wait_started(3)
    assert len(handle) == 7
    assert worker.num_processing == 3
    g.open()
    assert worker.wait(WAIT)
    assert g.peak == 3 and sorted(g.ended) == list(range(10))


def test_a_failing_topic_job_is_retried_then_dead_lettered_and_can_be_requeued() -> None:
    topics = varmq.new_topics()
    runs: list[tuple[Any, int]] = []
    lock = threading.Lock()
    healthy = threading.Event()

    def flaky(job: varmq.Job[Any]) -> None:
        with lock:
            runs.append((job.data, job.attempt))
        if job.data == "bad" and not healthy.is_set():
            raise RuntimeError(f"attempt {job.attempt} failed")
        if job.data == "twice" and job.attempt < 2:
            raise RuntimeError("first attempt failed")

    worker = varmq.new_worker(flaky, 2, retry=FAST, log_failures=False)
    handle = worker.bind_topic(topics, "jobs.#")
    topics.publish("jobs.a", "twice", message_id="t-1")
    topics.publish("jobs.b", "bad", message_id="b-1")
    assert worker.wait(WAIT)
    assert sorted(runs) == [("bad", 1), ("bad", 2), ("bad", 3), ("twice", 1), ("twice", 2)]
    [letter] = handle.dead_letters()
    assert (letter.id, letter.data, letter.attempts) == ("b-1", "bad", 3)
    assert "attempt 3 failed" in letter.error
    m = worker.metrics
    assert (m.retried, m.dead_lettered, m.successful, m.completed) == (3, 1, 1, 2)
    healthy.set()
    assert handle.requeue_dead() == 1
    assert worker.wait(WAIT)
    assert runs[-1] == ("bad", 1)  # a requeued dead letter starts again from attempt 1
    assert handle.dead_letters() == [] and handle.purge_dead() == 0


def test_a_paused_worker_leaves_messages_in_the_buffer_until_it_resumes(
    recorder: Recorder,
) -> None:
    topics = varmq.new_topics()
    worker = varmq.new_worker(recorder.fn, 2)
    handle = worker.bind_topic(topics, "t")
    assert worker.pause_and_wait(WAIT)
    for i in range(5):
        topics.publish("t", i)
    assert len(handle) == 5 and recorder.ran == []
    assert worker.queue_stats()[0]["waiting"] == 5
    worker.resume()
    assert worker.wait(WAIT)
    assert sorted(recorder.ran) == list(range(5))


def test_a_stopped_worker_takes_nothing_and_runs_the_buffer_after_a_restart(
    recorder: Recorder,
) -> None:
    topics = varmq.new_topics()
    worker = varmq.new_worker(recorder.fn, 1)
    handle = worker.bind_topic(topics, "t")
    assert worker.stop_and_wait(WAIT)
    topics.publish("t", "while stopped")
    assert len(handle) == 1
    worker.restart()
    assert worker.wait(WAIT)
    assert recorder.ran == ["while stopped"]


def test_a_stuck_dropping_subscription_counts_drops_in_stats_and_metrics(
    recorder: Recorder,
) -> None:
    topics = varmq.new_topics()
    worker = varmq.new_worker(recorder.fn, 1, auto_run=False)
    handle = worker.bind_topic(topics, "t", max_pending=4, on_full="drop_oldest")
    for i in range(10):
        assert topics.publish("t", i) == 1
    assert handle.dropped == 6 and len(handle) == 4
    stats = handle.stats()
    assert (stats["received"], stats["pending"], stats["dropped"]) == (10, 4, 6)
    assert worker.metrics.dropped == 6 and worker.metrics.submitted == 10
    row = worker.queue_stats()[0]
    assert (row["storage"], row["pattern"], row["dropped"], row["waiting"]) == ("topic", "t", 6, 4)
    worker.start()
    assert worker.wait(WAIT)
    assert recorder.ran == [6, 7, 8, 9]


def test_a_blocking_subscription_of_a_paused_worker_makes_publish_raise_in_time() -> None:
    topics = varmq.new_topics()
    worker = varmq.new_worker(lambda job: None, 1, auto_run=False)
    worker.bind_topic(topics, "t", max_pending=1, block_timeout=0.05, name="billing")
    other = topics.subscribe("t")
    topics.publish("t", 1)
    with pytest.raises(varmq.SubscriberFullError, match="'billing'"):
        topics.publish("t", 2)
    assert len(other) == 2


def test_after_unsubscribe_the_buffered_messages_still_run_and_new_ones_do_not_arrive(
    gate: Callable[[], Gate],
) -> None:
    g = gate()
    topics = varmq.new_topics()
    worker = varmq.new_worker(g.fn, 1)
    handle = worker.bind_topic(topics, "t")
    topics.publish("t", 1)
    topics.publish("t", 2)
    assert g.wait_started(1)
    assert handle.unsubscribe() is True and handle.unsubscribe() is False
    assert not handle.active
    assert topics.publish("t", 3) == 0
    g.open()
    assert worker.wait(WAIT)
    assert sorted(g.ended) == [1, 2]


def test_an_async_worker_runs_topic_jobs_on_its_loop() -> None:
    topics = varmq.new_topics()
    seen: list[Any] = []

    async def handle_message(job: varmq.Job[Any]) -> None:
        await asyncio.sleep(0)
        seen.append(job.data)

    worker = varmq.new_worker(handle_message, 4)
    worker.bind_topic(topics, "a.#")
    for i in range(20):
        topics.publish(f"a.{i % 3}", i)
    assert worker.wait(WAIT)
    assert sorted(seen) == list(range(20))


def test_a_topic_and_a_queue_bound_to_one_worker_share_its_slots(recorder: Recorder) -> None:
    topics = varmq.new_topics()
    worker = varmq.new_worker(recorder.fn, 2)
    queue = worker.bind_queue()
    worker.bind_topic(topics, "t")
    for i in range(50):
        queue.add(("queue", i))
        topics.publish("t", ("topic", i))
    assert worker.wait(WAIT)
    assert sorted(recorder.ran) == sorted([(k, i) for k in ("queue", "topic") for i in range(50)])


def test_bind_topic_needs_in_memory_topics_and_checks_its_options() -> None:
    worker = varmq.new_worker(lambda job: None, 1, auto_run=False)
    with pytest.raises(TypeError, match=r"bind_topic needs the Topics of varmq\.new_topics"):
        worker.bind_topic(object(), "t")  # type: ignore[arg-type]
    topics = varmq.new_topics()
    with pytest.raises(ValueError, match="topic pattern"):
        worker.bind_topic(topics, "a.b#")
    with pytest.raises(ValueError, match="on_full"):
        worker.bind_topic(topics, "t", on_full="never")  # type: ignore[arg-type]
    assert topics.stats() == []
