"""The conformance tests of handing jobs back, and of a storage that cannot answer.

Part of :class:`~varmq.testing.conformance.QueueConformance`; see that module for how to run the
suite. Two contracts are pinned here:

- ``release(ack_id)`` (:class:`~varmq.contract.protocols.ILeaseReleasable`): a taken job that never
  started goes back at once to its place in line, and the delivery does not count;
- an outage: while the storage cannot answer, every call raises (never ``TypeError`` or
  ``ValueError``) instead of answering for it, nothing is half done, and everything works
  again afterwards. The harness makes the outage: ``harness.outage()`` is a context manager
  (``QueuesHarness(..., outage=...)``); a storage whose harness has none skips these tests.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from varmq.contract.protocols import (
    ILeaseExtendable,
    ILeaseReleasable,
    IMultiAcknowledgeable,
    IQueueStats,
)
from varmq.testing._suite import (
    DISTRIBUTED_KINDS,
    LEASE,
    PRIORITY_KINDS,
    WAIT,
    SuiteBase,
    drain,
    kinds,
    put,
    take_one,
)
from varmq.testing.harness import QueueKind, StorageHarness

__all__ = ["LeaseConformance"]


class LeaseConformance(SuiteBase):
    """``release``, and the behaviour of every call during an outage."""

    # -- release --------------------------------------------------------------------------

    def test_release_puts_a_taken_job_back_in_its_place_at_once(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(ILeaseReleasable,))
        for item in (b"a", b"b", b"c"):
            put(q, kind, item)
        first = q.dequeue_batch_with_attempts(2)
        assert [item for item, _, _ in first] == [b"a", b"b"]
        assert q.release(first[1][1]) is True
        assert len(q) == 2
        assert q.values() == [b"b", b"c"]  # back in its place, before the job behind it
        assert q.acknowledge(first[0][1])
        assert drain(q) == [b"b", b"c"]

    def test_a_released_delivery_does_not_count_as_an_attempt(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(ILeaseReleasable,))
        put(q, kind, b"job")
        [(_, ack_id, attempt)] = q.dequeue_batch_with_attempts(1)
        assert attempt == 1
        assert q.release(ack_id)
        [(_, again, attempt)] = q.dequeue_batch_with_attempts(1)
        assert attempt == 1
        assert again != ack_id
        assert q.acknowledge(again)

    @kinds(PRIORITY_KINDS)
    def test_a_released_job_keeps_its_priority(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(ILeaseReleasable,))
        put(q, kind, b"urgent", priority=-5)
        put(q, kind, b"later", priority=5)
        item, ack_id = take_one(q)
        assert item == b"urgent"
        put(q, kind, b"middle", priority=0)
        assert q.release(ack_id)
        assert drain(q) == [b"urgent", b"middle", b"later"]

    def test_release_is_fenced_like_an_acknowledgement(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, lease=LEASE, needs=(ILeaseReleasable, ILeaseExtendable))
        put(q, kind, b"acked")
        _, acked = take_one(q)
        assert q.acknowledge(acked)
        assert q.release(acked) is False
        assert q.release("no-such-ack-id") is False
        put(q, kind, b"expires")
        _, stale = take_one(q)
        harness.advance(LEASE + 0.1)
        _, current = take_one(q)  # taken again: the first ack id is stale
        assert q.release(stale) is False
        assert q.acknowledge(current)
        assert len(q) == 0

    def test_a_job_released_through_one_object_is_taken_through_another(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(ILeaseReleasable)
        name = f"release-{id(harness)}-{kind}"
        mine = self.open(harness, kind, name=name)
        theirs = self.open(harness, kind, name=name)
        put(mine, kind, b"handed over")
        _, ack_id = take_one(mine)
        assert theirs.dequeue_with_ack_id() is None
        assert mine.release(ack_id)
        item, taken = take_one(theirs)
        assert item == b"handed over"
        assert theirs.acknowledge(taken)

    def test_release_works_after_close(self, harness: StorageHarness, kind: QueueKind) -> None:
        self.require(ILeaseReleasable)
        name = f"release-closed-{id(harness)}-{kind}"
        q = self.open(harness, kind, name=name)
        put(q, kind, b"job")
        _, ack_id = take_one(q)
        q.close()
        assert q.release(ack_id)
        other = self.open(harness, kind, name=name)
        assert drain(other) == [b"job"]

    @kinds(DISTRIBUTED_KINDS)
    def test_a_subscriber_hears_a_release(self, harness: StorageHarness, kind: QueueKind) -> None:
        self.require(ILeaseReleasable)
        name = f"release-heard-{id(harness)}-{kind}"
        q = self.open(harness, kind, name=name)
        listener = self.open(harness, kind, name=name)
        put(q, kind, b"job")
        _, ack_id = take_one(q)
        heard = threading.Event()
        listener.subscribe(lambda action: heard.set() if action == "enqueued" else None)
        assert q.release(ack_id)
        assert heard.wait(WAIT)

    # -- outages ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _outage(self, harness: StorageHarness) -> Iterator[None]:
        outage = getattr(harness, "outage", None)
        if outage is None:
            pytest.skip("the harness cannot take the storage away (no outage)")
        with outage():
            yield

    def test_a_take_while_the_storage_cannot_answer_raises_and_loses_nothing(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        put(q, kind, b"a")
        put(q, kind, b"b")
        with self._outage(harness), pytest.raises(Exception) as raised:
            q.dequeue_batch_with_attempts(2)
        assert not isinstance(raised.value, TypeError | ValueError)
        assert drain(q) == [b"a", b"b"]

    def test_extend_lease_while_the_storage_cannot_answer_raises_and_the_lease_holds(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(ILeaseExtendable,))
        put(q, kind, b"job")
        _, ack_id = take_one(q)
        with self._outage(harness), pytest.raises(Exception) as raised:
            q.extend_lease(ack_id)
        assert not isinstance(raised.value, TypeError | ValueError)
        assert q.extend_lease(ack_id) is True
        assert q.acknowledge(ack_id)

    def test_an_acknowledgement_while_the_storage_cannot_answer_raises_and_works_after(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        put(q, kind, b"job")
        _, ack_id = take_one(q)
        calls: list[Any] = [lambda: q.acknowledge(ack_id)]
        if IMultiAcknowledgeable in self.extensions:
            calls.append(lambda: q.acknowledge_many([ack_id]))
        for call in calls:
            with self._outage(harness), pytest.raises(Exception) as raised:
                call()
            assert not isinstance(raised.value, TypeError | ValueError)
        assert q.acknowledge(ack_id) is True
        assert len(q) == 0

    def test_an_enqueue_while_the_storage_cannot_answer_raises_and_stores_nothing(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        with self._outage(harness), pytest.raises(Exception) as raised:
            put(q, kind, b"lost?")
        assert not isinstance(raised.value, TypeError | ValueError)
        assert len(q) == 0
        assert put(q, kind, b"kept")
        assert drain(q) == [b"kept"]

    def test_counts_while_the_storage_cannot_answer_raise_or_are_true(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        put(q, kind, b"one")
        put(q, kind, b"two")
        counts: list[Any] = [lambda: len(q)]
        if IQueueStats in self.extensions:
            counts.append(lambda: q.stats()["waiting"])
        with self._outage(harness):
            for count in counts:
                try:
                    seen = count()
                except (TypeError, ValueError):
                    raise
                except Exception:
                    continue  # cannot answer: raising is right
                assert seen == 2, "a storage that cannot be read must not report a made-up count"
