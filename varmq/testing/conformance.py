"""The storage conformance suite: the tests every queue storage passes, ours and anyone's.

Written only against ``varmq.contract.protocols``; it never looks at how a storage works inside. To
run it on a storage, subclass :class:`QueueConformance` in a test module, in a class whose name
starts with ``Test`` so pytest collects it, and give it a harness. A store with the four ``new_*``
openers (like ``sqliteq.Queues``, ``redisq.Queues`` and the reference ``MemoryStorage``) needs no
harness code of its own, only :class:`QueuesHarness`::

    from varmq.testing import FakeWallClock
    from varmq.testing.conformance import ALL_EXTENSIONS, QueueConformance, QueuesHarness

    class TestMyStorage(QueueConformance):
        extensions = ALL_EXTENSIONS

        def make_harness(self) -> QueuesHarness:
            clock = FakeWallClock()
            store = mystore.connect("mystore://localhost", clock=clock)
            return QueuesHarness(lambda: store, clock.advance)

Any other object with the three methods of :class:`StorageHarness` does as well:
``new_queue(name, *, priority, distributed, **options)`` opens the queue ``name`` of that kind
with the store's options (``visibility_timeout`` always, the dead-letter retention options for
a storage that claims ``IDeadLetterable``, and bad values in the validation tests); called twice
with one name, it returns two objects on the same stored queue, as two processes would have.
``advance(seconds)`` lets lease and delay time pass (a fake clock, or ``time.sleep``); the suite
uses leases and delays of 0.5 s and advances 0.3 s or 0.6 s at a time. ``close()`` closes
everything the harness opened, once after each test. The store-level tests (``list_queues``,
``open_queue``, queue names, ``location``) need a harness with ``queues()``, as
:class:`QueuesHarness` has.

The fixture ``harness`` makes one harness per test and closes it. A subclass that needs other
fixtures (``tmp_path``, a server started once per session) overrides the ``harness`` fixture
instead of ``make_harness``. Tests run on each of the four kinds of queue (``queue``,
``priority_queue``, ``distributed_queue``, ``distributed_priority_queue``) that their claim
applies to. A storage that does not implement an extension protocol (batch takes, delivery
counts, ``acknowledge_many``, dedup, leases) narrows the class attribute ``extensions``; one that
also implements ``ICapacitySetter``, the retry protocols (``RETRY_EXTENSIONS``: delayed
enqueue, nack, dead letters, stats), job records (``RECORD_EXTENSIONS``), job progress
(``PROGRESS_EXTENSIONS``) or the topics of the store (``TOPIC_EXTENSIONS``:
``IStorageTopics``, ``ILiveTopics``) widens it, up to ``ALL_EXTENSIONS``. The tests of the
protocols left out are skipped; the ones kept are checked with ``isinstance``.

:class:`QueueConformance` is the sum of its parts, each a subclass of one base
(``varmq.testing._suite.SuiteBase``): :class:`BaseConformance` here (the queue protocols),
``RetryConformance`` (``conformance_retries``: delays, nacks, dead letters, stats),
``LeaseConformance`` (``conformance_leases``: ``release``, and every call during an outage),
``CheckConformance`` (``conformance_checks``: the argument and option checks every storage
shares), ``WorkerConformance`` (``conformance_worker``: the worker on this storage) and
``RecordConformance`` (``conformance_records``: job records, their outcomes and cancel),
``ProgressConformance`` (``conformance_progress``: the progress of running jobs in their
records, for a storage that claims ``IJobProgress``, in ``PROGRESS_EXTENSIONS``).
``SettingsConformance`` (``conformance_settings``: the settings stored with a queue, shared by
its openers). ``TopicConformance`` (``conformance_topics``: the store's topics, bindings and live
subscribers). ``WorkerRecordConformance`` (``conformance_workers``: the records a store keeps of
the workers consuming its queues, ``WORKER_EXTENSIONS``). ``AsyncConformance``
(``conformance_async``: ``enqueue_async`` and its forms, for
a storage that claims ``IAsyncEnqueue``; add ``ASYNC_EXTENSIONS`` to ``extensions``).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from varmq.contract.protocols import (
    DEFAULT_MAX_PAYLOAD,
    MAX_JOB_ID_BYTES,
    IBatchAcknowledgeable,
    ICapacitySetter,
    ICountedDelivery,
    IDedupQueue,
    IDistributedPriorityQueue,
    IDistributedQueue,
    ILeaseExtendable,
    IMultiAcknowledgeable,
    IPersistentPriorityQueue,
    IPersistentQueue,
)
from varmq.testing._suite import (
    ALL_EXTENSIONS,
    ASYNC_EXTENSIONS,
    DEFAULT_EXTENSIONS,
    DISTRIBUTED_KINDS,
    FIFO_KINDS,
    LEASE,
    PRIORITY_KINDS,
    PROGRESS_EXTENSIONS,
    RECORD_EXTENSIONS,
    RETRY_EXTENSIONS,
    TOPIC_EXTENSIONS,
    WAIT,
    WORKER_EXTENSIONS,
    SuiteBase,
    drain,
    fresh_name,
    kinds,
    put,
    take,
)
from varmq.testing.conformance_async import AsyncConformance
from varmq.testing.conformance_checks import CheckConformance
from varmq.testing.conformance_leases import LeaseConformance
from varmq.testing.conformance_progress import ProgressConformance
from varmq.testing.conformance_rates import RateConformance
from varmq.testing.conformance_records import RecordConformance
from varmq.testing.conformance_retries import RetryConformance
from varmq.testing.conformance_settings import SettingsConformance
from varmq.testing.conformance_topics import TopicConformance
from varmq.testing.conformance_worker import WorkerConformance
from varmq.testing.conformance_workers import WorkerRecordConformance
from varmq.testing.harness import QueueKind, QueuesHarness, StorageHarness

__all__ = [
    "ALL_EXTENSIONS",
    "ASYNC_EXTENSIONS",
    "DEFAULT_EXTENSIONS",
    "PROGRESS_EXTENSIONS",
    "RECORD_EXTENSIONS",
    "RETRY_EXTENSIONS",
    "TOPIC_EXTENSIONS",
    "WORKER_EXTENSIONS",
    "BaseConformance",
    "QueueConformance",
    "QueueKind",
    "QueuesHarness",
    "StorageHarness",
]


class BaseConformance(SuiteBase):
    """The tests of the queue protocols and their default extensions (a part of the suite)."""

    # -- the protocols of each kind -------------------------------------------------------------

    def test_queue_implements_the_protocols_of_its_kind(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        expected: dict[QueueKind, type] = {
            QueueKind(False, False): IPersistentQueue,
            QueueKind(True, False): IPersistentPriorityQueue,
            QueueKind(False, True): IDistributedQueue,
            QueueKind(True, True): IDistributedPriorityQueue,
        }
        for protocol in (expected[kind], *self.extensions):
            if protocol in TOPIC_EXTENSIONS:
                continue  # claimed by the store's topics(), not by its queues
            assert isinstance(q, protocol), (
                f"{kind} does not implement {protocol.__name__}; implement it, or leave it out"
                f" of {type(self).__name__}.extensions"
            )

    # -- order ----------------------------------------------------------------------------------

    @kinds(FIFO_KINDS)
    def test_fifo_queue_hands_jobs_out_in_enqueue_order(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        items = [f"job-{i}".encode() for i in range(50)]
        for item in items:
            assert q.enqueue(item)
        assert drain(q) == items

    @kinds(PRIORITY_KINDS)
    def test_priority_queue_hands_lower_priorities_out_first(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        jobs = [(5, b"five"), (-3, b"minus-three"), (2**31 - 1, b"max"), (0, b"zero")]
        jobs += [(-(2**31), b"min"), (1_000_000, b"million"), (1, b"one")]
        for priority, item in jobs:
            assert q.enqueue(item, priority)
        assert drain(q) == [item for _, item in sorted(jobs)]

    @kinds(PRIORITY_KINDS)
    def test_priority_queue_keeps_fifo_order_among_equal_priorities(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        for i in range(30):
            assert q.enqueue(f"{i % 3}-{i}".encode(), i % 3)
        expected = [f"{p}-{i}".encode() for p in range(3) for i in range(30) if i % 3 == p]
        assert drain(q) == expected

    def test_taken_job_is_the_bytes_stored_with_a_str_ack_id(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        envelope = b'{"id": "job-1", "status": "Created", "data": "h\\u00e9"}'
        binary = bytes(range(256)) * 4  # NUL bytes and bytes that are not UTF-8
        large = b"x" * 300_000
        for item in (envelope, binary, large, b""):
            assert put(q, kind, item)
            taken = q.dequeue_with_ack_id()
            assert taken is not None
            assert type(taken[0]) is bytes and taken[0] == item
            assert isinstance(taken[1], str) and taken[1]
            assert q.acknowledge(taken[1])

    def test_a_job_over_max_payload_is_refused_naming_its_size_and_nothing_is_stored(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, max_payload=1000)
        assert put(q, kind, b"x" * 1000)  # at the limit: stored
        with pytest.raises(ValueError, match=r"1,001 bytes; max_payload is 1,000 bytes"):
            put(q, kind, b"x" * 1001)
        if isinstance(q, IDedupQueue):
            with pytest.raises(ValueError, match="max_payload"):
                q.enqueue_dedup(b"y" * 5000, "big-1")
        assert len(q) == 1
        unlimited = self.open(harness, kind, max_payload=0)
        assert put(unlimited, kind, b"z" * (DEFAULT_MAX_PAYLOAD + 1))
        assert len(unlimited) == 1

    def test_the_default_max_payload_refuses_a_job_above_4_mib(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        with pytest.raises(ValueError, match=r"4,194,305 bytes; max_payload is 4,194,304"):
            put(q, kind, b"x" * (DEFAULT_MAX_PAYLOAD + 1))
        assert len(q) == 0

    def test_a_job_id_over_1024_bytes_is_refused_and_nothing_is_stored(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=[IDedupQueue])
        assert q.enqueue_dedup(b"ok", "i" * MAX_JOB_ID_BYTES)
        with pytest.raises(ValueError, match=r"job_id of 1,025 bytes; at most 1,024"):
            q.enqueue_dedup(b"no", "i" * (MAX_JOB_ID_BYTES + 1))
        with pytest.raises(ValueError, match="at most 1,024"):
            q.enqueue_dedup(b"no", "é" * 513)  # 1,026 bytes of UTF-8
        assert len(q) == 1

    def test_identical_payloads_are_distinct_jobs(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        assert put(q, kind, b"same")
        assert put(q, kind, b"same")
        assert len(q) == 2
        first, second = q.dequeue_with_ack_id(), q.dequeue_with_ack_id()
        assert first is not None and second is not None
        assert first[0] == second[0] == b"same"
        assert first[1] != second[1]
        assert q.acknowledge(first[1]) and q.acknowledge(second[1])

    # -- taking and acknowledging ----------------------------------------------------------------

    def test_take_from_an_empty_queue_returns_none(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        assert q.dequeue_with_ack_id() is None
        assert q.dequeue() is None

    def test_dequeue_without_a_lease_removes_the_job(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        assert put(q, kind, b"a") and put(q, kind, b"b")
        assert q.dequeue() == b"a"
        assert len(q) == 1
        assert q.dequeue() == b"b"
        assert q.dequeue() is None

    def test_acknowledged_job_is_not_taken_again(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        assert put(q, kind, b"a")
        taken = q.dequeue_with_ack_id()
        assert taken is not None and taken[0] == b"a"
        assert q.acknowledge(taken[1]) is True
        assert len(q) == 0
        assert q.dequeue_with_ack_id() is None

    def test_acknowledged_job_does_not_come_back_when_its_lease_would_have_expired(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, lease=LEASE, needs=(ILeaseExtendable,))
        assert put(q, kind, b"a")
        taken = q.dequeue_with_ack_id()
        assert taken is not None and q.acknowledge(taken[1])
        harness.advance(LEASE * 1.2)
        assert len(q) == 0
        assert q.dequeue_with_ack_id() is None

    def test_acknowledge_of_an_unknown_ack_id_returns_false(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        assert put(q, kind, b"a")
        assert q.acknowledge("no-such-ack-id") is False
        assert q.acknowledge("") is False
        assert len(q) == 1

    def test_second_acknowledge_of_one_ack_id_returns_false(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        assert put(q, kind, b"a")
        taken = q.dequeue_with_ack_id()
        assert taken is not None
        assert q.acknowledge(taken[1]) is True
        assert q.acknowledge(taken[1]) is False

    def test_len_and_values_leave_out_jobs_in_flight(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        for item in (b"a", b"b", b"c"):
            assert put(q, kind, item)
        assert len(q) == 3
        taken = q.dequeue_with_ack_id()
        assert taken is not None
        assert len(q) == 2
        assert q.values() == [b"b", b"c"]
        assert q.acknowledge(taken[1])
        assert len(q) == 2

    def test_values_lists_waiting_jobs_in_take_order_without_taking_them(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        for priority, item in [(3, b"c"), (1, b"a"), (3, b"d"), (2, b"b")]:
            assert put(q, kind, item, priority)
        expected = [b"a", b"b", b"c", b"d"] if kind.priority else [b"c", b"a", b"d", b"b"]
        assert q.values() == expected
        assert q.values() == expected
        assert len(q) == 4
        assert drain(q) == expected

    def test_purge_removes_every_waiting_job(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        for item in (b"a", b"b", b"c"):
            assert put(q, kind, item)
        q.purge()
        assert len(q) == 0
        assert q.values() == []
        assert q.dequeue_with_ack_id() is None
        assert put(q, kind, b"after")
        assert take(q) == b"after"

    # -- closing -----------------------------------------------------------------------------------

    def test_closed_queue_refuses_enqueue(self, harness: StorageHarness, kind: QueueKind) -> None:
        q = self.open(harness, kind)
        q.close()
        assert put(q, kind, b"late") is False

    def test_closed_queue_hands_out_no_jobs(self, harness: StorageHarness, kind: QueueKind) -> None:
        q = self.open(harness, kind)
        assert put(q, kind, b"a")
        q.close()
        assert q.dequeue_with_ack_id() is None
        assert q.dequeue() is None
        if IBatchAcknowledgeable in self.extensions:
            assert q.dequeue_batch_with_ack_ids(5) == []

    def test_closed_queue_still_accepts_acks_of_jobs_taken_before(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        assert put(q, kind, b"a")
        taken = q.dequeue_with_ack_id()
        assert taken is not None
        q.close()
        assert q.acknowledge(taken[1]) is True

    # -- several queue objects -------------------------------------------------------------------

    def test_two_queue_objects_on_one_name_share_jobs(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        first, second = self.open(harness, kind, name), self.open(harness, kind, name)
        assert put(first, kind, b"a") and put(first, kind, b"b")
        assert len(second) == 2
        assert take(second) == b"a"
        assert take(first) == b"b"
        assert take(first) is None and take(second) is None

    def test_queues_with_different_names_are_independent(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        one, other = self.open(harness, kind), self.open(harness, kind)
        assert put(one, kind, b"a")
        assert len(other) == 0
        assert take(other) is None
        assert take(one) == b"a"

    def test_concurrent_takes_through_several_objects_deliver_each_job_once(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        objects = [self.open(harness, kind, name) for _ in range(4)]
        items = [f"job-{i}".encode() for i in range(200)]
        for item in items:
            assert put(objects[0], kind, item)
        taken: list[list[bytes]] = [[] for _ in objects]
        errors: list[BaseException] = []

        def consume(q: Any, into: list[bytes]) -> None:
            try:
                into.extend(drain(q))
            except BaseException as error:  # reported by the test thread below
                errors.append(error)

        threads = [
            threading.Thread(target=consume, args=(q, into), name=f"conformance-consumer-{i}")
            for i, (q, into) in enumerate(zip(objects, taken, strict=True))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        assert not errors, errors
        assert sorted(item for part in taken for item in part) == sorted(items)

    # -- leases ----------------------------------------------------------------------------------

    def test_lease_seconds_is_the_visibility_timeout(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, lease=LEASE, needs=(ILeaseExtendable,))
        assert q.lease_seconds == pytest.approx(LEASE)

    def test_expired_lease_makes_the_job_available_again_with_a_new_ack_id(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, lease=LEASE, needs=(ILeaseExtendable,))
        assert put(q, kind, b"a")
        first = q.dequeue_with_ack_id()
        assert first is not None
        assert q.dequeue_with_ack_id() is None
        harness.advance(LEASE * 1.2)
        again = q.dequeue_with_ack_id()
        assert again is not None
        assert again[0] == b"a"
        assert again[1] != first[1]
        assert q.acknowledge(again[1]) is True

    @kinds(FIFO_KINDS)
    def test_expired_job_returns_to_its_place_in_line(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, lease=LEASE, needs=(ILeaseExtendable,))
        assert q.enqueue(b"a") and q.enqueue(b"b")
        assert take(q) == b"a"
        assert q.enqueue(b"c")
        harness.advance(LEASE * 1.2)
        assert drain(q) == [b"a", b"b", b"c"]

    @kinds(PRIORITY_KINDS)
    def test_expired_job_returns_with_its_priority_and_place(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, lease=LEASE, needs=(ILeaseExtendable,))
        assert q.enqueue(b"a", 2) and q.enqueue(b"b", 2)
        assert take(q) == b"a"
        assert q.enqueue(b"c", 2) and q.enqueue(b"late", 3) and q.enqueue(b"urgent", 1)
        harness.advance(LEASE * 1.2)
        assert drain(q) == [b"urgent", b"a", b"b", b"c", b"late"]

    def test_redelivery_after_an_expired_lease_counts_as_attempt_two(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, lease=LEASE, needs=(ILeaseExtendable, ICountedDelivery))
        assert put(q, kind, b"a")
        [(item, _, attempt)] = q.dequeue_batch_with_attempts(1)
        assert (item, attempt) == (b"a", 1)
        harness.advance(LEASE * 1.2)
        [(item, ack_id, attempt)] = q.dequeue_batch_with_attempts(1)
        assert (item, attempt) == (b"a", 2)
        assert q.acknowledge(ack_id)

    def test_stale_ack_id_is_refused_once_the_job_was_taken_again(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, lease=LEASE, needs=(ILeaseExtendable,))
        assert put(q, kind, b"a")
        stale = q.dequeue_with_ack_id()
        assert stale is not None
        harness.advance(LEASE * 1.2)
        fresh = q.dequeue_with_ack_id()
        assert fresh is not None
        assert q.acknowledge(stale[1]) is False
        assert q.extend_lease(stale[1]) is False
        assert q.extend_lease(fresh[1]) is True
        assert q.acknowledge(fresh[1]) is True

    def test_expired_ack_id_is_refused_and_the_job_is_kept(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, lease=LEASE, needs=(ILeaseExtendable,))
        assert put(q, kind, b"a")
        expired = q.dequeue_with_ack_id()
        assert expired is not None
        harness.advance(LEASE * 1.2)
        assert q.extend_lease(expired[1]) is False
        assert q.acknowledge(expired[1]) is False
        assert take(q) == b"a"

    def test_extend_lease_keeps_a_job_leased_past_its_first_deadline(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, lease=LEASE, needs=(ILeaseExtendable,))
        assert put(q, kind, b"a")
        taken = q.dequeue_with_ack_id()
        assert taken is not None
        harness.advance(LEASE * 0.6)
        assert q.extend_lease(taken[1]) is True
        harness.advance(LEASE * 0.6)
        assert q.dequeue_with_ack_id() is None
        assert q.acknowledge(taken[1]) is True

    def test_extend_lease_of_an_unknown_or_acknowledged_ack_id_returns_false(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(ILeaseExtendable,))
        assert q.extend_lease("no-such-ack-id") is False
        assert put(q, kind, b"a")
        taken = q.dequeue_with_ack_id()
        assert taken is not None and q.acknowledge(taken[1])
        assert q.extend_lease(taken[1]) is False

    # -- batch takes -------------------------------------------------------------------------------

    def test_batch_take_returns_at_most_n_jobs_in_order_with_distinct_ack_ids(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IBatchAcknowledgeable,))
        items = [f"job-{i}".encode() for i in range(5)]
        for item in items:
            assert put(q, kind, item)
        batch = q.dequeue_batch_with_ack_ids(3)
        assert [item for item, _ in batch] == items[:3]
        assert len({ack_id for _, ack_id in batch}) == 3
        assert len(q) == 2
        assert all(q.acknowledge(ack_id) for _, ack_id in batch)

    def test_batch_take_returns_fewer_jobs_when_fewer_are_ready(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IBatchAcknowledgeable,))
        assert put(q, kind, b"a") and put(q, kind, b"b")
        assert [item for item, _ in q.dequeue_batch_with_ack_ids(10)] == [b"a", b"b"]
        assert q.dequeue_batch_with_ack_ids(10) == []

    def test_batch_take_from_an_empty_queue_returns_an_empty_list(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IBatchAcknowledgeable,))
        assert q.dequeue_batch_with_ack_ids(4) == []

    def test_batch_take_with_attempts_counts_a_first_delivery_as_one(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(ICountedDelivery,))
        for item in (b"a", b"b", b"c"):
            assert put(q, kind, item)
        batch = q.dequeue_batch_with_attempts(2)
        assert [(item, attempt) for item, _, attempt in batch] == [(b"a", 1), (b"b", 1)]
        assert batch[0][1] != batch[1][1]
        assert q.dequeue_batch_with_attempts(5)[0][0] == b"c"
        assert q.dequeue_batch_with_attempts(5) == []

    # -- acknowledge_many --------------------------------------------------------------------------

    def test_acknowledge_many_returns_one_result_per_ack_id_in_order(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IMultiAcknowledgeable,))
        for item in (b"a", b"b", b"c"):
            assert put(q, kind, item)
        a, b = q.dequeue_with_ack_id(), q.dequeue_with_ack_id()
        assert a is not None and b is not None
        results = q.acknowledge_many([a[1], "no-such-ack-id", b[1], a[1]])
        assert results == [True, False, True, False]
        assert q.acknowledge_many([]) == []
        assert q.values() == [b"c"]

    def test_acknowledge_many_answers_each_id_of_a_large_batch(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        # More ids than a storage may settle in one statement, in another order than taken,
        # with unknown and repeated ids among them.
        q = self.open(harness, kind, needs=(IMultiAcknowledgeable,))
        count = 70
        for i in range(count):
            assert put(q, kind, str(i).encode())
        taken = []
        for _ in range(count - 1):  # one job stays waiting
            got = q.dequeue_with_ack_id()
            assert got is not None
            taken.append(got[1])
        ids: list[str] = []
        expected: list[bool] = []
        for i, ack_id in enumerate(reversed(taken)):
            ids.append(ack_id)
            expected.append(True)
            if i % 9 == 0:
                ids.append(f"no-such-ack-id-{i}")
                expected.append(False)
            if i % 13 == 0:
                ids.append(ack_id)
                expected.append(False)
        assert q.acknowledge_many(ids) == expected
        assert q.values() == [str(count - 1).encode()]
        assert q.acknowledge_many(taken[:3]) == [False, False, False]

    # -- dedup -------------------------------------------------------------------------------------

    def test_dedup_stores_a_repeated_job_id_once_while_it_waits(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDedupQueue,))
        priority = 0 if kind.priority else None
        assert q.enqueue_dedup(b"first", "job-1", priority) is True
        assert q.enqueue_dedup(b"second", "job-1", priority) is True
        assert q.values() == [b"first"]

    def test_dedup_stores_a_repeated_job_id_once_while_it_is_in_flight(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDedupQueue,))
        priority = 0 if kind.priority else None
        assert q.enqueue_dedup(b"first", "job-1", priority)
        taken = q.dequeue_with_ack_id()
        assert taken is not None
        assert q.enqueue_dedup(b"second", "job-1", priority) is True
        assert len(q) == 0
        assert q.acknowledge(taken[1])

    def test_dedup_stores_a_job_id_again_once_the_first_was_acknowledged(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDedupQueue,))
        priority = 0 if kind.priority else None
        assert q.enqueue_dedup(b"first", "job-1", priority)
        taken = q.dequeue_with_ack_id()
        assert taken is not None and q.acknowledge(taken[1])
        assert q.enqueue_dedup(b"again", "job-1", priority) is True
        assert q.values() == [b"again"]

    def test_dedup_keeps_jobs_with_different_ids_apart(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDedupQueue,))
        priority = 0 if kind.priority else None
        assert q.enqueue_dedup(b"same", "job-1", priority)
        assert q.enqueue_dedup(b"same", "job-2", priority)
        assert len(q) == 2

    @kinds(PRIORITY_KINDS)
    def test_dedup_honours_the_priority(self, harness: StorageHarness, kind: QueueKind) -> None:
        q = self.open(harness, kind, needs=(IDedupQueue,))
        assert q.enqueue_dedup(b"later", "job-1", 5)
        assert q.enqueue_dedup(b"sooner", "job-2", -5)
        assert q.values() == [b"sooner", b"later"]

    # -- capacity ----------------------------------------------------------------------------------

    def test_set_capacity_refuses_enqueues_once_that_many_jobs_wait(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(ICapacitySetter,))
        q.set_capacity(2)
        assert put(q, kind, b"a") and put(q, kind, b"b")
        assert put(q, kind, b"c") is False
        assert q.values() == [b"a", b"b"]
        assert take(q) == b"a"
        assert put(q, kind, b"c") is True
        q.set_capacity(0)
        assert put(q, kind, b"d") is True

    # -- distributed queues ------------------------------------------------------------------------

    @kinds(DISTRIBUTED_KINDS)
    def test_subscriber_hears_enqueued_when_another_object_adds_a_job(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        listener, producer = self.open(harness, kind, name), self.open(harness, kind, name)
        heard: list[str] = []
        event = threading.Event()

        def on_message(message: str) -> None:
            heard.append(message)
            event.set()

        listener.subscribe(on_message)
        # Delivery may be lossy while a subscription starts up: add jobs until one is heard.
        for attempt in range(int(WAIT / 0.1)):
            assert put(producer, kind, f"job-{attempt}".encode())
            if event.wait(timeout=0.1):
                break
        assert event.is_set(), "the subscriber heard nothing"
        assert set(heard) == {"enqueued"}

    @kinds(DISTRIBUTED_KINDS)
    def test_subscriber_hears_every_add_after_a_take_found_the_queue_empty(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        # ISubscribable's promise: a storage may stay silent while consumers are busy, but an
        # add after a take that came back short (the consumer going idle) is always announced.
        name = fresh_name()
        listener, producer = self.open(harness, kind, name), self.open(harness, kind, name)
        heard = threading.Event()
        listener.subscribe(lambda action: heard.set() if action == "enqueued" else None)
        for round_ in range(3):
            drain(listener)  # its last take finds nothing: an idle consumer
            heard.clear()
            assert put(producer, kind, f"job-{round_}".encode())
            assert heard.wait(WAIT), f"round {round_}: the add after an empty take was not heard"


class QueueConformance(
    BaseConformance,
    AsyncConformance,
    RetryConformance,
    LeaseConformance,
    CheckConformance,
    WorkerConformance,
    RecordConformance,
    ProgressConformance,
    RateConformance,
    SettingsConformance,
    TopicConformance,
    WorkerRecordConformance,
):
    """The whole suite; subclass it with a ``Test*`` name and implement ``make_harness``."""
