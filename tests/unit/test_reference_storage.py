"""The reference storage's own behaviour beyond the conformance suite: faults, clock, edges."""

from __future__ import annotations

import logging
import time

import pytest

from varmq.contract.stored_settings import QueueSettingsError
from varmq.testing import (
    DEAD_LETTER_LIMIT,
    DEAD_LETTER_MAX_AGE,
    FakeClock,
    Faults,
    MemoryStorage,
    ReferenceDistributedPriorityQueue,
    ReferenceDistributedQueue,
    ReferenceQueue,
)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def storage(clock: FakeClock) -> MemoryStorage:
    return MemoryStorage(clock=clock)


# -- failure switches ------------------------------------------------------------------------


def test_refuse_enqueue_makes_enqueue_return_false_until_switched_off(
    storage: MemoryStorage,
) -> None:
    q = storage.new_priority_queue("q")
    q.faults.refuse_enqueue = True
    assert q.enqueue(b"a", 0) is False
    assert q.enqueue_dedup(b"a", "job-1", 0) is False
    assert len(q) == 0
    q.faults.refuse_enqueue = False
    assert q.enqueue(b"a", 0) is True
    assert len(q) == 1


def test_take_error_makes_every_take_raise_until_switched_off(storage: MemoryStorage) -> None:
    q = storage.new_queue("q")
    assert q.enqueue(b"a")
    q.faults.take_error = ConnectionError("injected")
    with pytest.raises(ConnectionError, match="injected"):
        q.dequeue_with_ack_id()
    with pytest.raises(ConnectionError):
        q.dequeue_batch_with_ack_ids(3)
    with pytest.raises(ConnectionError):
        q.dequeue_batch_with_attempts(3)
    with pytest.raises(ConnectionError):
        q.dequeue()
    assert len(q) == 1
    q.faults.take_error = None
    taken = q.dequeue_with_ack_id()
    assert taken is not None and taken[0] == b"a"


def test_refused_ack_leaves_the_job_leased_until_its_lease_expires(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    q = storage.new_queue("q", visibility_timeout=10.0)
    assert q.enqueue(b"a")
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    q.faults.refuse_ack = True
    assert q.acknowledge(taken[1]) is False
    assert q.acknowledge_many([taken[1], "other"]) == [False, False]
    assert q.dequeue_with_ack_id() is None
    q.faults.refuse_ack = False
    clock.advance(10.0)
    [(item, _, attempt)] = q.dequeue_batch_with_attempts(1)
    assert (item, attempt) == (b"a", 2)


def test_refused_extension_leaves_the_deadline_as_it_was(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    q = storage.new_queue("q", visibility_timeout=10.0)
    assert q.enqueue(b"a")
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    clock.advance(6.0)
    q.faults.refuse_extend = True
    assert q.extend_lease(taken[1]) is False
    clock.advance(6.0)
    assert q.acknowledge(taken[1]) is False
    q.faults.refuse_extend = False
    again = q.dequeue_with_ack_id()
    assert again is not None and q.extend_lease(again[1]) is True


def test_refused_nack_leaves_the_job_leased_until_switched_off(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    q = storage.new_queue("q", visibility_timeout=10.0)
    assert q.enqueue(b"a")
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    q.faults.refuse_nack = True
    assert q.nack(taken[1], 0) is False
    assert len(q) == 0
    assert q.stats()["in_flight"] == 1
    q.faults.refuse_nack = False
    assert q.nack(taken[1], 5.0) is True
    clock.advance(5.0)
    [(item, _, attempt)] = q.dequeue_batch_with_attempts(1)
    assert (item, attempt) == (b"a", 2)


def test_refused_dead_letter_leaves_the_job_leased_until_its_lease_expires(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    q = storage.new_queue("q", visibility_timeout=10.0)
    assert q.enqueue(b"a")
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    q.faults.refuse_dead_letter = True
    assert q.dead_letter(taken[1], "boom") is False
    assert q.dead_letters() == []
    assert q.dequeue_with_ack_id() is None
    q.faults.refuse_dead_letter = False
    assert q.dead_letter(taken[1], "boom") is True
    assert [letter["item"] for letter in q.dead_letters()] == [b"a"]


def test_refuse_enqueue_also_refuses_delayed_enqueues(storage: MemoryStorage) -> None:
    q = storage.new_queue("q")
    q.faults.refuse_enqueue = True
    assert q.enqueue_delayed(b"a", 1.0) is False
    assert q.stats()["delayed"] == 0


def test_faults_belong_to_one_queue_object(storage: MemoryStorage) -> None:
    broken, healthy = storage.new_queue("q"), storage.new_queue("q")
    broken.faults.refuse_enqueue = True
    broken.faults.take_error = ConnectionError("injected")
    assert healthy.enqueue(b"a")
    assert healthy.dequeue() == b"a"


def test_faults_clear_turns_every_switch_off() -> None:
    faults = Faults(True, ConnectionError("injected"), True, True, True, True)
    faults.clear()
    assert faults == Faults()


# -- items, kinds and names ------------------------------------------------------------------


def test_str_items_are_stored_as_utf8_bytes(storage: MemoryStorage) -> None:
    q = storage.new_queue("q")
    assert q.enqueue("héllo")
    assert q.dequeue() == "héllo".encode()


def test_opening_a_name_as_the_other_kind_is_refused(storage: MemoryStorage) -> None:
    storage.new_queue("emails")
    with pytest.raises(ValueError, match="'emails' is a FIFO queue"):
        storage.new_priority_queue("emails")
    storage.new_distributed_queue("emails")  # same kind, with subscribe: fine


def test_fifo_dedup_ignores_a_priority(storage: MemoryStorage) -> None:
    q = storage.new_queue("q")
    assert q.enqueue_dedup(b"a", "job-1", 5)
    assert q.enqueue(b"b")
    assert q.values() == [b"a", b"b"]


# -- clock and leases ------------------------------------------------------------------------


def test_fake_clock_moves_only_forward() -> None:
    clock = FakeClock(start=5.0)
    assert clock() == 5.0
    clock.advance(1.5)
    assert clock() == 6.5
    with pytest.raises(ValueError):
        clock.advance(-1)


def test_lease_expires_when_the_clock_reaches_its_deadline(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    q = storage.new_queue("q", visibility_timeout=10.0)
    assert q.enqueue(b"a")
    assert q.dequeue_with_ack_id() is not None
    clock.advance(9.5)
    assert len(q) == 0
    clock.advance(0.5)
    assert len(q) == 1


def test_purge_leaves_jobs_in_flight_leased(storage: MemoryStorage) -> None:
    q = storage.new_queue("q")
    assert q.enqueue(b"a") and q.enqueue(b"b")
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    q.purge()
    assert len(q) == 0
    assert q.acknowledge(taken[1]) is True


# -- closing ---------------------------------------------------------------------------------


def test_closed_object_reports_nothing_but_still_finishes_its_leases(
    storage: MemoryStorage,
) -> None:
    q = storage.new_queue("q")
    assert q.enqueue(b"a") and q.enqueue(b"b")
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    q.close()
    assert len(q) == 0
    assert q.values() == []
    assert q.dequeue_batch_with_attempts(5) == []
    assert q.extend_lease(taken[1]) is True
    assert q.acknowledge(taken[1]) is True
    assert storage.new_queue("q").values() == [b"b"]  # the jobs stay in storage


def test_storage_close_closes_every_queue_object(storage: MemoryStorage) -> None:
    q, pq = storage.new_queue("q"), storage.new_priority_queue("pq")
    storage.close()
    assert q.enqueue(b"a") is False
    assert pq.enqueue(b"a", 0) is False


# -- subscribers -----------------------------------------------------------------------------


def test_subscribers_hear_enqueues_from_any_object_of_the_name(storage: MemoryStorage) -> None:
    heard: list[str] = []
    storage.new_distributed_queue("q").subscribe(heard.append)
    storage.new_queue("q").enqueue(b"a")
    storage.new_distributed_queue("q").enqueue(b"b")
    storage.new_distributed_queue("other").enqueue(b"c")
    assert heard == ["enqueued", "enqueued"]


def test_subscribers_hear_nothing_for_a_refused_or_duplicate_enqueue(
    storage: MemoryStorage,
) -> None:
    heard: list[str] = []
    q = storage.new_distributed_priority_queue("q")
    q.subscribe(heard.append)
    assert q.enqueue_dedup(b"a", "job-1", 0)
    assert q.enqueue_dedup(b"a", "job-1", 0)
    q.faults.refuse_enqueue = True
    assert q.enqueue(b"b", 0) is False
    assert heard == ["enqueued"]


def test_a_closed_object_stops_hearing_enqueues(storage: MemoryStorage) -> None:
    heard: list[str] = []
    listener = storage.new_distributed_queue("q")
    listener.subscribe(heard.append)
    listener.close()
    storage.new_queue("q").enqueue(b"a")
    assert heard == []


def test_a_raising_subscriber_does_not_fail_the_enqueue(
    storage: MemoryStorage, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(message: str) -> None:
        raise RuntimeError("subscriber bug")

    q = storage.new_distributed_queue("q")
    q.subscribe(broken)
    with caplog.at_level(logging.WARNING, logger="varmq.testing"):
        assert q.enqueue(b"a") is True
    assert len(q) == 1
    assert "a subscriber raised" in caplog.text


# -- delays, nacks and dead letters ----------------------------------------------------------


def test_delayed_job_is_due_when_the_clock_reaches_its_time(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    q = storage.new_queue("q")
    assert q.enqueue_delayed(b"a", 10.0)
    clock.advance(9.5)
    assert len(q) == 0
    clock.advance(0.5)
    assert len(q) == 1


def test_nack_and_requeue_go_behind_waiting_jobs_even_when_the_clock_has_not_moved(
    storage: MemoryStorage,
) -> None:
    q = storage.new_queue("q")
    assert q.enqueue(b"a") and q.enqueue(b"b") and q.enqueue(b"c")
    first, second = q.dequeue_with_ack_id(), q.dequeue_with_ack_id()
    assert first is not None and second is not None
    assert q.nack(first[1], 0)
    assert q.dead_letter(second[1], "boom") and q.requeue_dead() == 1
    assert q.values() == [b"c", b"a", b"b"]


def test_fifo_delayed_enqueue_ignores_a_priority(storage: MemoryStorage) -> None:
    q = storage.new_queue("q")
    assert q.enqueue_delayed(b"a", 0, None, 5)
    assert q.enqueue(b"b")
    assert q.values() == [b"a", b"b"]


def test_purge_leaves_delayed_jobs_delayed(storage: MemoryStorage, clock: FakeClock) -> None:
    q = storage.new_queue("q")
    assert q.enqueue(b"now") and q.enqueue_delayed(b"later", 1.0)
    q.purge()
    assert len(q) == 0
    clock.advance(1.0)
    assert q.values() == [b"later"]


def test_closed_object_still_nacks_and_dead_letters_what_it_took(
    storage: MemoryStorage,
) -> None:
    q = storage.new_queue("q")
    assert q.enqueue(b"a") and q.enqueue(b"b")
    first, second = q.dequeue_with_ack_id(), q.dequeue_with_ack_id()
    assert first is not None and second is not None
    q.close()
    assert q.enqueue_delayed(b"c", 0) is False
    assert q.nack(first[1], 0) is True
    assert q.dead_letter(second[1], "boom") is True
    assert q.requeue_dead() == 0 and q.purge_dead() == 0  # closed: refused
    assert q.stats()["dead"] == 1  # looking still works
    reopened = storage.new_queue("q")
    assert reopened.values() == [b"a"]
    assert reopened.requeue_dead() == 1


def test_dead_at_is_unix_time_moving_with_the_storage_clock(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    q = storage.new_queue("q")
    for item, step in ((b"a", 0.0), (b"b", 3600.0)):
        clock.advance(step)
        assert q.enqueue(item)
        taken = q.dequeue_with_ack_id()
        assert taken is not None and q.dead_letter(taken[1], "boom")
    first, second = q.dead_letters()
    assert abs(first["dead_at"] - time.time()) < 60
    assert second["dead_at"] - first["dead_at"] == pytest.approx(3600.0)


def test_requeued_job_does_not_take_a_job_id_stored_meanwhile(storage: MemoryStorage) -> None:
    q = storage.new_queue("q")
    assert q.enqueue_dedup(b"first", "job-1")
    taken = q.dequeue_with_ack_id()
    assert taken is not None and q.dead_letter(taken[1], "boom")
    assert q.enqueue_dedup(b"second", "job-1")
    assert q.requeue_dead() == 1
    assert q.values() == [b"second", b"first"]
    assert _drain_acked(q) == [b"second", b"first"]
    assert q.enqueue_dedup(b"third", "job-1")  # the id is free again after the ack
    assert q.values() == [b"third"]


def test_requeue_dead_wakes_subscribers(storage: MemoryStorage) -> None:
    heard: list[str] = []
    q = storage.new_distributed_queue("q")
    assert q.enqueue(b"a")
    taken = q.dequeue_with_ack_id()
    assert taken is not None and q.dead_letter(taken[1], "boom")
    q.subscribe(heard.append)
    assert q.enqueue_delayed(b"later", 1.0)  # nothing to take yet: nobody is woken
    assert heard == []
    assert q.requeue_dead() == 1
    assert heard == ["enqueued"]


def test_dead_letter_retention_is_stored_with_the_queue_by_its_first_opener(
    storage: MemoryStorage,
) -> None:
    tight = storage.new_queue("q", dead_letter_limit=1)
    inherits = storage.new_queue("q")  # leaves the option out: the queue's value applies
    for q in (inherits, inherits, tight):
        assert q.enqueue(b"x")
        taken = q.dequeue_with_ack_id()
        assert taken is not None and q.dead_letter(taken[1], "boom")
    assert len(inherits.dead_letters()) == 1
    with pytest.raises(QueueSettingsError, match=r"dead_letter_limit=2 given.*=1\b"):
        storage.new_queue("q", dead_letter_limit=2)


def test_dead_letter_defaults_keep_ten_thousand_for_seven_days() -> None:
    assert DEAD_LETTER_LIMIT == 10_000
    assert DEAD_LETTER_MAX_AGE == 7 * 24 * 3600


# -- stats and listing -----------------------------------------------------------------------


def test_oldest_age_of_a_job_back_from_an_expired_lease_counts_from_its_first_enqueue(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    q = storage.new_queue("q", visibility_timeout=10.0)
    assert q.enqueue(b"a")
    assert q.dequeue_with_ack_id() is not None
    clock.advance(10.0)
    assert q.stats()["oldest_age"] == 10.0


def test_list_queues_names_every_queue_with_its_kind(storage: MemoryStorage) -> None:
    assert storage.list_queues() == []
    storage.new_priority_queue("urgent")
    storage.new_distributed_queue("emails")
    storage.new_queue("emails")
    assert storage.list_queues() == [("emails", "fifo"), ("urgent", "priority")]


def test_open_queue_opens_an_existing_queue_as_its_own_kind(storage: MemoryStorage) -> None:
    storage.new_priority_queue("urgent").enqueue(b"a", 3)
    storage.new_queue("emails").enqueue(b"b")
    urgent = storage.open_queue("urgent", visibility_timeout=5.0)
    emails = storage.open_queue("emails")
    assert isinstance(urgent, ReferenceDistributedPriorityQueue)
    assert isinstance(emails, ReferenceDistributedQueue)
    assert urgent.lease_seconds == 5.0
    assert urgent.values() == [b"a"] and emails.values() == [b"b"]


def test_open_queue_of_an_unknown_name_raises_naming_it(storage: MemoryStorage) -> None:
    with pytest.raises(LookupError, match="no queue named 'missing'"):
        storage.open_queue("missing")
    assert storage.list_queues() == []


def _drain_acked(q: ReferenceQueue) -> list[bytes]:
    items = []
    while (taken := q.dequeue_with_ack_id()) is not None:
        items.append(taken[0])
        assert q.acknowledge(taken[1])
    return items


def test_reference_live_subscribers_count_exactly_what_they_missed_while_disconnected() -> None:
    storage = MemoryStorage()
    topics = storage.topics()
    live = topics.subscribe("t.#")
    topics.publish("t.before", 0)
    with storage.disconnect_subscribers():
        for i in range(3):
            topics.publish("t.meanwhile", i)
        assert live.reconnects == 0
    topics.publish("t.after", 4)
    assert [m.data for m in (live.get(0), live.get(0))] == [0, 4]
    assert (live.missed, live.reconnects) == (3, 1)
    topics.close()
    assert not live.active
