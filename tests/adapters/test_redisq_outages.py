"""redisq when Redis goes away: empty results instead of exceptions, one warning, and recovery.

Run on a redis-server of each test's own (append-only file on, so a restart keeps the jobs, as
in production) and on fakeredis with its connection switched off (``stoppable_backend``).
Notifications are checked here too, since surviving a restart is their hard part.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from typing import TYPE_CHECKING

import pytest

from redisq.pubsub import Listener

if TYPE_CHECKING:
    from tests.adapters.conftest import Backend

WAIT = 10.0  # seconds; the longest wait for another thread or the server


def _drain(events: queue.Queue[str]) -> list[str]:
    out = []
    while not events.empty():
        out.append(events.get_nowait())
    return out


def _unreachable_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "redisq" and r.levelno == logging.WARNING and "unreachable" in r.message
    ]


def test_every_method_returns_its_empty_value_while_redis_is_down_and_works_after(
    stoppable_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="redisq")
    queues = stoppable_backend.queues()
    q = queues.new_distributed_priority_queue("outage", visibility_timeout=60)
    assert q.enqueue(b"a", 1) and q.enqueue(b"b", 2)
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    heard: queue.Queue[str] = queue.Queue()

    stoppable_backend.stop()
    started = time.monotonic()
    assert q.enqueue(b"c", 1) is False
    assert q.enqueue_dedup(b"c", "job-c", 1) is False
    assert q.dequeue() is None
    assert q.dequeue_with_ack_id() is None
    assert q.dequeue_batch_with_ack_ids(3) == []
    assert q.dequeue_batch_with_attempts(3) == []
    assert len(q) == 0
    assert q.values() == []
    assert q.purge() is None
    assert q.acknowledge(taken[1]) is False
    assert q.acknowledge_many([taken[1], "other"]) == [False, False]
    assert q.extend_lease(taken[1]) is False
    assert q.enqueue_delayed(b"c", 5.0) is False
    assert q.nack(taken[1], 0) is False and q.dead_letter(taken[1], "boom") is False
    assert q.dead_letters() == [] and q.requeue_dead() == 0 and q.purge_dead() == 0
    stats = q.stats()  # the shape every storage gives, zeros while nothing can be read
    assert stats == {"waiting": 0, "in_flight": 0, "delayed": 0, "dead": 0, "oldest_age": 0.0}
    assert [type(value) for value in stats.values()] == [int, int, int, int, float]
    q.subscribe(heard.put)  # returns although it cannot subscribe yet
    other = queues.new_queue("opened-while-down")
    assert other.enqueue(b"x") is False and len(other) == 0
    assert time.monotonic() - started < WAIT
    assert len(_unreachable_warnings(caplog)) == 1

    stoppable_backend.start()
    assert q.acknowledge(taken[1]) is True  # the lease outlived the outage
    assert q.values() == [b"b"]
    assert q.enqueue(b"c", 0) and q.dequeue() == b"c"
    assert other.enqueue(b"x") and other.values() == [b"x"]
    assert any("answers again" in r.message for r in caplog.records if r.name == "redisq")
    listener: Listener = queues._listener
    assert listener.wait_for(lambda it: it.confirmations > 0, WAIT)  # subscribed at last
    producer = stoppable_backend.queues().new_distributed_priority_queue("outage")
    assert producer.enqueue(b"d", 0)
    assert heard.get(timeout=WAIT) == "enqueued"


def test_warning_is_logged_again_for_a_second_outage(
    stoppable_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    q = stoppable_backend.queues().new_queue("two-outages")
    for _ in range(2):
        stoppable_backend.stop()
        assert [q.enqueue(b"a") for _ in range(3)] == [False] * 3
        stoppable_backend.start()
        assert q.enqueue(b"a") is True
    assert len(_unreachable_warnings(caplog)) == 2


def test_jobs_and_leases_survive_a_redis_restart(stoppable_backend: Backend) -> None:
    q = stoppable_backend.queues().new_priority_queue("restart", visibility_timeout=60)
    assert q.enqueue(b"a", 1) and q.enqueue(b"b", 2) and q.enqueue_dedup(b"c", "job-c", 3)
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    stoppable_backend.restart()
    assert q.acknowledge(taken[1]) is True
    assert q.acknowledge(taken[1]) is False
    assert q.enqueue_dedup(b"c-again", "job-c", 0) is True
    assert q.values() == [b"b", b"c"]


def test_subscription_survives_redis_restarting(stoppable_backend: Backend) -> None:
    queues = stoppable_backend.queues()
    consumer = queues.new_distributed_queue("notify")
    heard: queue.Queue[str] = queue.Queue()
    consumer.subscribe(heard.put)
    producer = stoppable_backend.queues().new_distributed_queue("notify")
    assert producer.enqueue(b"before")
    assert heard.get(timeout=WAIT) == "enqueued"
    listener: Listener = queues._listener
    confirmed = listener.confirmations

    stoppable_backend.stop()
    assert listener.wait_for(lambda it: not it.connected, WAIT)
    stoppable_backend.start()
    assert listener.wait_for(lambda it: it.confirmations > confirmed, WAIT)
    # After a reconnect the listener tells every subscriber to look (messages may be lost).
    assert set(_drain(heard)) == {"enqueued"}

    assert producer.enqueue(b"after")
    assert heard.get(timeout=WAIT) == "enqueued"


def test_subscribers_hear_enqueued_from_another_queues_for_both_kinds(backend: Backend) -> None:
    consumers = backend.queues()
    producers = backend.queues()
    fifo_heard, prio_heard = threading.Event(), threading.Event()
    consumers.new_distributed_queue("fifo").subscribe(lambda _: fifo_heard.set())
    consumers.new_distributed_priority_queue("prio").subscribe(lambda _: prio_heard.set())
    assert producers.new_distributed_priority_queue("prio").enqueue(b"x", 3)
    assert prio_heard.wait(WAIT) and not fifo_heard.is_set()
    assert producers.new_distributed_queue("fifo").enqueue_dedup(b"y", "job-y")
    assert fifo_heard.wait(WAIT)


def test_a_subscriber_that_raises_does_not_silence_the_others(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    queues = backend.queues()
    q = queues.new_distributed_queue("raising")
    heard = threading.Event()

    def broken(_: str) -> None:
        raise RuntimeError("subscriber bug")

    q.subscribe(broken)
    q.subscribe(lambda _: heard.set())
    for _ in range(2):
        heard.clear()
        assert backend.queues().new_distributed_queue("raising").enqueue(b"x")
        assert heard.wait(WAIT)
    assert sum("raised" in r.message for r in caplog.records if r.name == "redisq") == 1


def test_closing_a_distributed_queue_stops_its_subscribers_only(backend: Backend) -> None:
    queues = backend.queues()
    closed, kept = (
        queues.new_distributed_queue("close-sub"),
        queues.new_distributed_queue("close-sub"),
    )
    closed_heard: queue.Queue[str] = queue.Queue()
    kept_heard: queue.Queue[str] = queue.Queue()
    closed.subscribe(closed_heard.put)
    kept.subscribe(kept_heard.put)
    closed.close()
    assert kept.enqueue(b"x")
    assert kept_heard.get(timeout=WAIT) == "enqueued"
    # Both callbacks run on the one listener thread, in order: had the closed queue's callback
    # still been registered, it would have run by now.
    assert closed_heard.empty()


def test_queues_close_stops_the_pubsub_thread(backend: Backend) -> None:
    queues = backend.queues()
    queues.new_distributed_queue("thread").subscribe(lambda _: None)
    listener: Listener = queues._listener
    assert listener.running
    assert any(t.name == "redisq:pubsub" for t in threading.enumerate())
    queues.close()
    assert not listener.running
