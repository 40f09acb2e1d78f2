"""redisq's own claims about delays, nacks, dead letters, stats and the queue registry.

The shared semantics are checked by the conformance suite (``test_redisq_conformance.py``, on a
test clock); here: the Redis server's own clock, a Redis restart, what the script stores, and the
operator calls of ``Queues``. Each test runs on a real redis-server and on fakeredis.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import pytest

import redisq

if TYPE_CHECKING:
    from tests.adapters.conftest import Backend, MsClock

DELAY = 0.3  # seconds of real time, where the server's clock is used


def test_delayed_job_waits_for_the_redis_clock_then_is_taken(backend: Backend) -> None:
    q = backend.queues().new_distributed_queue("later")
    assert q.enqueue_delayed(b"later", DELAY)
    assert q.dequeue_with_ack_id() is None and len(q) == 0
    assert q.stats()["delayed"] == 1
    time.sleep(DELAY + 0.1)  # let the delay pass on the Redis server's clock
    taken = q.dequeue_batch_with_attempts(5)
    assert [(item, attempts) for item, _, attempts in taken] == [(b"later", 1)]


def test_delayed_jobs_survive_a_redis_restart(stoppable_backend: Backend, clock: MsClock) -> None:
    q = stoppable_backend.queues(clock).new_priority_queue("restart")
    assert q.enqueue_delayed(b"delayed", 30.0, "job-1", 2)
    stoppable_backend.restart()
    reopened = stoppable_backend.queues(clock).new_priority_queue("restart")
    assert reopened.enqueue_delayed(b"again", 30.0, "job-1", 2)  # dedup: still stored
    assert reopened.stats()["delayed"] == 1
    clock.advance(31.0)
    assert reopened.values() == [b"delayed"]


def test_a_take_promotes_a_bounded_number_of_due_jobs_and_later_takes_the_rest(
    backend: Backend, clock: MsClock
) -> None:
    q = backend.queues(clock).new_queue("promote")
    for i in range(250):
        assert q.enqueue_delayed(f"job-{i:03}".encode(), 1.0)
    clock.advance(2.0)
    assert len(q) == 250
    taken = [item for _ in range(5) for item, _ in q.dequeue_batch_with_ack_ids(60)]
    assert taken == [f"job-{i:03}".encode() for i in range(250)]


def test_nack_without_delay_keeps_priority_attempts_and_the_callers_job_id(
    backend: Backend,
) -> None:
    q = backend.queues().new_distributed_priority_queue("nack")
    assert q.enqueue_dedup(b"a", "job-a", -3)
    [(_, ack, attempts)] = q.dequeue_batch_with_attempts(1)
    assert attempts == 1 and q.nack(ack, 0) is True
    assert q.nack(ack, 0) is False and q.acknowledge(ack) is False
    assert q.enqueue_dedup(b"dup", "job-a", -3)  # still stored: not added twice
    assert q.enqueue(b"z", 5)
    [(item, ack, attempts)] = q.dequeue_batch_with_attempts(1)
    assert (item, attempts) == (b"a", 2)
    assert q.acknowledge(ack)
    assert q.values() == [b"z"]


def test_dead_letter_keeps_any_error_text_and_requeue_restores_dedup(backend: Backend) -> None:
    q = backend.queues().new_priority_queue("dead")
    assert q.enqueue_dedup(b"\x00\xffbytes", "id with spaces 7", 4)
    _, ack = q.dequeue_with_ack_id() or (b"", "")
    error = "ValueError: 3 4 five\nline two ✓"
    assert q.dead_letter(ack, error) is True
    assert q.dead_letter(ack, error) is False
    [letter] = q.dead_letters()
    assert letter["item"] == b"\x00\xffbytes" and letter["error"] == error
    assert letter["attempts"] == 1 and abs(letter["dead_at"] - time.time()) < 60
    assert q.stats()["dead"] == 1 and len(q) == 0
    assert q.requeue_dead([letter["key"], "no-such-key"]) == 1
    assert q.enqueue_dedup(b"dup", "id with spaces 7", 4)  # the requeued job holds the id
    assert q.values() == [b"\x00\xffbytes"]
    assert q.dequeue_batch_with_attempts(1)[0][2] == 1  # attempts reset


def test_dead_letter_retention_is_pruned_in_the_step_that_adds(
    backend: Backend, clock: MsClock
) -> None:
    q = backend.queues(clock).new_queue("retention", dead_letter_limit=2, dead_letter_max_age=10)
    for item in (b"a", b"b", b"c"):
        assert q.enqueue(item)
        _, ack = q.dequeue_with_ack_id() or (b"", "")
        assert q.dead_letter(ack, "x")
        clock.advance(1.0)
    assert [letter["item"] for letter in q.dead_letters()] == [b"b", b"c"]
    clock.advance(20.0)
    assert len(q.dead_letters()) == 2  # age is pruned when a dead letter arrives
    assert q.enqueue(b"d")
    _, ack = q.dequeue_with_ack_id() or (b"", "")
    assert q.dead_letter(ack, "x")
    assert [letter["item"] for letter in q.dead_letters()] == [b"d"]


def test_stats_oldest_age_looks_at_every_priority(backend: Backend, clock: MsClock) -> None:
    q = backend.queues(clock).new_priority_queue("ages")
    assert q.enqueue(b"old-low", 9)
    clock.advance(5.0)
    assert q.enqueue(b"new-high", -1)
    clock.advance(1.0)
    stats = q.stats()
    assert stats["waiting"] == 2 and stats["oldest_age"] == pytest.approx(6.0)


def test_queue_options_are_checked() -> None:
    queues = redisq.new("redis://127.0.0.1:1/0")
    try:
        with pytest.raises(ValueError, match="dead_letter_limit"):
            queues.new_queue("bad", dead_letter_limit=-1)
        with pytest.raises(ValueError, match="dead_letter_max_age"):
            queues.new_queue("bad", dead_letter_max_age=-1.0)
    finally:
        queues.close()


def test_list_queues_names_every_queue_opened_with_its_kind(backend: Backend) -> None:
    queues = backend.queues()
    queues.new_queue("emails")
    queues.new_distributed_priority_queue("reports {x}")
    queues.new_queue("emails")
    other = backend.queues()
    assert other.list_queues() == [("emails", "fifo"), ("reports {x}", "priority")]


def test_open_queue_opens_an_existing_queue_as_its_own_kind(backend: Backend) -> None:
    queues = backend.queues()
    assert queues.new_priority_queue("prio").enqueue(b"p", 3)
    assert queues.new_queue("fifo").enqueue(b"f")
    other = backend.queues()
    prio, fifo = other.open_queue("prio"), other.open_queue("fifo")
    assert isinstance(prio, redisq.DistributedPriorityQueue) and prio.values() == [b"p"]
    assert isinstance(fifo, redisq.DistributedQueue) and fifo.values() == [b"f"]
    with pytest.raises(redisq.UnknownQueueError, match="'nope'"):
        other.open_queue("nope")
