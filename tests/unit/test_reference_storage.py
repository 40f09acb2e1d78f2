"""The reference storage's own behaviour beyond the conformance suite: faults, clock, edges."""

from __future__ import annotations

import logging

import pytest

from varmq.testing import FakeClock, Faults, MemoryStorage


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


def test_faults_belong_to_one_queue_object(storage: MemoryStorage) -> None:
    broken, healthy = storage.new_queue("q"), storage.new_queue("q")
    broken.faults.refuse_enqueue = True
    broken.faults.take_error = ConnectionError("injected")
    assert healthy.enqueue(b"a")
    assert healthy.dequeue() == b"a"


def test_faults_clear_turns_every_switch_off() -> None:
    faults = Faults(True, ConnectionError("injected"), True, True)
    faults.clear()
    assert faults == Faults()


# -- items, kinds and names ------------------------------------------------------------------


def test_str_items_are_stored_as_utf8_bytes(storage: MemoryStorage) -> None:
    q = storage.new_queue("q")
    assert q.enqueue("héllo")
    assert q.dequeue() == "héllo".encode()


@pytest.mark.parametrize("item", [1, 1.5, bytearray(b"x"), None, {"id": "x"}], ids=repr)
def test_other_item_types_raise_a_type_error_naming_the_queue(
    storage: MemoryStorage, item: object
) -> None:
    q = storage.new_queue("emails")
    with pytest.raises(TypeError, match=r"'emails'.*bytes or str"):
        q.enqueue(item)  # type: ignore[arg-type]
    assert len(q) == 0


def test_priority_must_be_an_int(storage: MemoryStorage) -> None:
    q = storage.new_priority_queue("q")
    with pytest.raises(TypeError, match="priority"):
        q.enqueue(b"a", 1.5)  # type: ignore[arg-type]


def test_opening_a_name_as_the_other_kind_is_refused(storage: MemoryStorage) -> None:
    storage.new_queue("emails")
    with pytest.raises(ValueError, match="'emails' is a FIFO queue"):
        storage.new_priority_queue("emails")
    storage.new_distributed_queue("emails")  # same kind, with subscribe: fine


def test_visibility_timeout_must_be_positive(storage: MemoryStorage) -> None:
    with pytest.raises(ValueError, match="visibility_timeout"):
        storage.new_queue("q", visibility_timeout=0)


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
