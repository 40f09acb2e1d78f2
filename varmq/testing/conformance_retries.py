"""The conformance tests of delayed jobs, nacks, dead letters and stats: ``RetryConformance``.

A part of :class:`varmq.testing.conformance.QueueConformance`: a storage runs these tests by
subclassing ``QueueConformance`` as usual, not this class alone.
Each test runs only when the storage claims its protocols (``IDelayedEnqueue``, ``INackable``,
``IDeadLetterable``, ``IQueueStats``, listed together in ``RETRY_EXTENSIONS``) in ``extensions``.

The semantics checked are those written in ``varmq.contract.protocols``: a delayed or nacked job is
not handed out before it is due, then joins the end of its priority's line at its due time; a nack
or dead letter with a stale ack id is refused and changes nothing; dead letters are listed oldest
first, can be requeued with their attempts reset, and are bounded by count and age. Delays are 0.5 s
and time passes by ``harness.advance``, as in the lease tests.
"""

from __future__ import annotations

from typing import Any

from varmq.contract.protocols import (
    ICountedDelivery,
    IDeadLetterable,
    IDedupQueue,
    IDelayedEnqueue,
    ILeaseExtendable,
    INackable,
    IQueueStats,
)
from varmq.testing._suite import (
    DELAY,
    LEASE,
    PRIORITY_KINDS,
    SuiteBase,
    drain,
    fresh_name,
    kill,
    kinds,
    priority_arg,
    put,
    take,
    take_one,
)
from varmq.testing.harness import QueueKind, StorageHarness

__all__ = ["RetryConformance"]

OLD_UNIX_TIME = 1_000_000_000.0
"""2001-09-09: any ``dead_at`` in Unix seconds is later than this."""


def _delay(q: Any, kind: QueueKind, item: bytes, delay: float, priority: int = 0) -> bool:
    """``enqueue_delayed`` without a job id, with ``priority`` on priority queues."""
    return bool(q.enqueue_delayed(item, delay, None, priority_arg(kind, priority)))


class RetryConformance(SuiteBase):
    """Tests of ``IDelayedEnqueue``, ``INackable``, ``IDeadLetterable`` and ``IQueueStats``."""

    # -- delayed enqueue ---------------------------------------------------------------------

    def test_delayed_job_is_not_handed_out_before_its_delay(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDelayedEnqueue,))
        assert _delay(q, kind, b"later", DELAY) is True
        assert q.dequeue_with_ack_id() is None
        harness.advance(DELAY * 0.6)
        assert q.dequeue_with_ack_id() is None
        harness.advance(DELAY * 0.6)
        assert drain(q) == [b"later"]

    def test_delayed_jobs_come_out_in_due_order(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDelayedEnqueue,))
        assert _delay(q, kind, b"due-last", DELAY * 1.6)
        assert _delay(q, kind, b"due-first", DELAY)
        assert _delay(q, kind, b"due-second", DELAY * 1.2)
        harness.advance(DELAY * 2)
        assert drain(q) == [b"due-first", b"due-second", b"due-last"]

    def test_due_delayed_job_joins_the_end_of_its_line_at_its_due_time(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDelayedEnqueue,))
        assert put(q, kind, b"waiting-before")
        assert _delay(q, kind, b"delayed", DELAY)
        harness.advance(DELAY * 0.6)
        assert put(q, kind, b"waiting-while-delayed")
        harness.advance(DELAY * 0.6)  # due now, and has been since before the next enqueue
        assert put(q, kind, b"added-after-due")
        expected = [b"waiting-before", b"waiting-while-delayed", b"delayed", b"added-after-due"]
        assert q.values() == expected
        assert drain(q) == expected

    @kinds(PRIORITY_KINDS)
    def test_due_delayed_job_is_handed_out_by_its_priority(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDelayedEnqueue,))
        assert q.enqueue(b"low", 5) and q.enqueue(b"mid", 3)
        assert q.enqueue_delayed(b"urgent", DELAY, None, 1)
        assert q.enqueue_delayed(b"lowest", DELAY, None, 9)
        assert q.values() == [b"mid", b"low"]
        harness.advance(DELAY * 1.2)
        assert drain(q) == [b"urgent", b"mid", b"low", b"lowest"]

    def test_len_and_values_leave_out_delayed_jobs_until_they_are_due(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDelayedEnqueue,))
        assert put(q, kind, b"now")
        assert _delay(q, kind, b"later", DELAY)
        assert len(q) == 1
        assert q.values() == [b"now"]
        harness.advance(DELAY * 1.2)
        assert len(q) == 2
        assert q.values() == [b"now", b"later"]

    def test_delayed_enqueue_without_a_positive_delay_is_available_now(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDelayedEnqueue,))
        assert put(q, kind, b"first")
        assert _delay(q, kind, b"zero", 0)
        assert _delay(q, kind, b"negative", -1.0)
        assert len(q) == 3
        assert drain(q) == [b"first", b"zero", b"negative"]

    def test_delayed_job_id_is_stored_once_while_the_job_is_delayed(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDelayedEnqueue, IDedupQueue))
        priority = priority_arg(kind)
        assert q.enqueue_delayed(b"first", DELAY, "job-1", priority) is True
        assert q.enqueue_delayed(b"second", DELAY, "job-1", priority) is True
        assert q.enqueue_dedup(b"third", "job-1", priority) is True
        assert len(q) == 0
        harness.advance(DELAY * 1.2)
        assert drain(q) == [b"first"]
        assert q.enqueue_delayed(b"again", 0, "job-1", priority) is True
        assert q.values() == [b"again"]

    def test_delays_survive_reopening_the_queue_through_another_object(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IDelayedEnqueue)
        name = fresh_name()
        first = self.open(harness, kind, name)
        assert _delay(first, kind, b"later", DELAY)
        first.close()
        second = self.open(harness, kind, name)
        assert second.dequeue_with_ack_id() is None
        harness.advance(DELAY * 0.6)
        assert second.dequeue_with_ack_id() is None
        harness.advance(DELAY * 0.6)
        assert drain(second) == [b"later"]

    # -- nack --------------------------------------------------------------------------------

    def test_nacked_job_is_not_handed_out_before_its_delay(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(INackable,))
        assert put(q, kind, b"a")
        _, ack_id = take_one(q)
        assert q.nack(ack_id, DELAY) is True
        assert len(q) == 0
        assert q.dequeue_with_ack_id() is None
        harness.advance(DELAY * 0.6)
        assert q.dequeue_with_ack_id() is None
        harness.advance(DELAY * 0.6)
        assert drain(q) == [b"a"]

    def test_nacked_job_counts_one_more_delivery_on_its_next_take(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(INackable, ICountedDelivery))
        assert put(q, kind, b"a")
        [(_, ack_id, attempt)] = q.dequeue_batch_with_attempts(1)
        assert attempt == 1
        assert q.nack(ack_id, DELAY)
        harness.advance(DELAY * 1.2)
        [(item, ack_id, attempt)] = q.dequeue_batch_with_attempts(1)
        assert (item, attempt) == (b"a", 2)
        assert q.nack(ack_id, 0)
        [(item, ack_id, attempt)] = q.dequeue_batch_with_attempts(1)
        assert (item, attempt) == (b"a", 3)
        assert q.acknowledge(ack_id)

    @kinds(PRIORITY_KINDS)
    def test_nacked_job_keeps_its_priority(self, harness: StorageHarness, kind: QueueKind) -> None:
        q = self.open(harness, kind, needs=(INackable,))
        assert q.enqueue(b"urgent", 1) and q.enqueue(b"low", 5)
        taken, ack_id = take_one(q)
        assert taken == b"urgent"
        assert q.nack(ack_id, DELAY)
        assert q.enqueue(b"mid", 3)
        harness.advance(DELAY * 1.2)
        assert drain(q) == [b"urgent", b"mid", b"low"]

    def test_nack_without_a_delay_puts_the_job_at_the_end_of_its_line_now(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(INackable,))
        assert put(q, kind, b"a") and put(q, kind, b"b")
        taken, ack_id = take_one(q)
        assert taken == b"a"
        harness.advance(DELAY * 0.6)
        assert q.nack(ack_id, 0) is True
        assert len(q) == 2
        assert drain(q) == [b"b", b"a"]

    def test_nack_after_the_lease_expired_is_refused_and_changes_nothing(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(
            harness, kind, lease=LEASE, needs=(INackable, ILeaseExtendable, ICountedDelivery)
        )
        assert put(q, kind, b"a")
        _, expired = take_one(q)
        harness.advance(LEASE * 1.2)
        assert q.nack(expired, DELAY * 100) is False
        assert len(q) == 1  # not delayed by the refused nack
        [(item, ack_id, attempt)] = q.dequeue_batch_with_attempts(1)
        assert (item, attempt) == (b"a", 2)
        assert q.acknowledge(ack_id)

    def test_nack_after_another_consumer_took_the_job_is_refused(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(INackable, ILeaseExtendable)
        name = fresh_name()
        q = self.open(harness, kind, name, lease=LEASE)
        other = self.open(harness, kind, name, lease=LEASE)
        assert put(q, kind, b"a")
        _, stale = take_one(q)
        harness.advance(LEASE * 1.2)
        _, fresh = take_one(other)
        assert q.nack(stale, 0) is False
        assert len(q) == 0 and q.dequeue_with_ack_id() is None  # still leased by the other
        assert other.acknowledge(fresh) is True

    def test_nack_of_an_unknown_or_acknowledged_ack_id_returns_false(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(INackable,))
        assert q.nack("no-such-ack-id", 0) is False
        assert put(q, kind, b"a")
        _, ack_id = take_one(q)
        assert q.acknowledge(ack_id)
        assert q.nack(ack_id, 0) is False
        assert len(q) == 0

    def test_nacked_job_id_is_stored_once_while_the_job_waits_out_its_delay(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(INackable, IDedupQueue))
        priority = priority_arg(kind)
        assert q.enqueue_dedup(b"first", "job-1", priority)
        _, ack_id = take_one(q)
        assert q.nack(ack_id, DELAY)
        assert q.enqueue_dedup(b"second", "job-1", priority) is True
        assert len(q) == 0
        harness.advance(DELAY * 1.2)
        assert drain(q) == [b"first"]

    # -- dead letters ------------------------------------------------------------------------

    def test_dead_letter_moves_the_job_out_of_the_queue_onto_the_shelf(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDeadLetterable,))
        envelope = b'{"id": "job-1", "status": "Created", "data": 1}'
        assert put(q, kind, envelope)
        _, ack_id = take_one(q)
        assert q.dead_letter(ack_id, "ValueError: bad input") is True
        assert len(q) == 0
        assert q.values() == []
        assert q.dequeue_with_ack_id() is None
        assert q.acknowledge(ack_id) is False
        [letter] = q.dead_letters()
        assert set(letter) == {"key", "item", "attempts", "error", "dead_at"}
        assert isinstance(letter["key"], str) and letter["key"]
        assert type(letter["item"]) is bytes and letter["item"] == envelope
        assert letter["attempts"] == 1
        assert letter["error"] == "ValueError: bad input"
        assert isinstance(letter["dead_at"], float) and letter["dead_at"] > OLD_UNIX_TIME

    def test_dead_letter_records_how_often_the_job_was_handed_out(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, lease=LEASE, needs=(IDeadLetterable, ILeaseExtendable))
        assert put(q, kind, b"a")
        take_one(q)
        harness.advance(LEASE * 1.2)
        _, ack_id = take_one(q)
        assert q.dead_letter(ack_id, "boom")
        assert [letter["attempts"] for letter in q.dead_letters()] == [2]

    def test_dead_letter_with_a_stale_ack_id_is_refused_and_changes_nothing(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, lease=LEASE, needs=(IDeadLetterable, ILeaseExtendable))
        assert q.dead_letter("no-such-ack-id", "boom") is False
        assert put(q, kind, b"a")
        _, expired = take_one(q)
        harness.advance(LEASE * 1.2)
        assert q.dead_letter(expired, "boom") is False
        assert len(q) == 1
        _, fresh = take_one(q)
        assert q.dead_letter(expired, "boom") is False
        assert q.dead_letters() == []
        assert q.acknowledge(fresh) is True
        assert q.dead_letter(fresh, "boom") is False
        assert q.dead_letters() == []

    def test_dead_letters_are_listed_oldest_first_up_to_the_limit(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDeadLetterable,))
        items = [f"job-{i}".encode() for i in range(4)]
        for i, item in enumerate(items):
            kill(q, kind, item, f"error {i}")
            harness.advance(0.01)
        letters = q.dead_letters()
        assert [letter["item"] for letter in letters] == items
        assert [letter["error"] for letter in letters] == [f"error {i}" for i in range(4)]
        assert len({letter["key"] for letter in letters}) == 4
        dead_at = [letter["dead_at"] for letter in letters]
        assert dead_at == sorted(dead_at)
        assert [letter["item"] for letter in q.dead_letters(limit=2)] == items[:2]
        assert q.dead_letters(limit=0) == []

    def test_requeue_dead_puts_chosen_dead_letters_back_with_attempts_reset(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(
            harness, kind, lease=LEASE, needs=(IDeadLetterable, ICountedDelivery, ILeaseExtendable)
        )
        assert put(q, kind, b"a")
        take_one(q)
        harness.advance(LEASE * 1.2)  # a's second delivery is the one that dies
        _, ack_id = take_one(q)
        assert q.dead_letter(ack_id, "boom")
        kill(q, kind, b"b")
        by_item = {letter["item"]: letter["key"] for letter in q.dead_letters()}
        assert q.requeue_dead([by_item[b"a"], "no-such-key"]) == 1
        assert [letter["item"] for letter in q.dead_letters()] == [b"b"]
        assert len(q) == 1
        [(item, ack_id, attempt)] = q.dequeue_batch_with_attempts(1)
        assert (item, attempt) == (b"a", 1)
        assert q.acknowledge(ack_id)

    def test_requeue_dead_without_keys_puts_every_dead_letter_back(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDeadLetterable,))
        for item in (b"a", b"b", b"c"):
            kill(q, kind, item)
        assert q.requeue_dead() == 3
        assert q.dead_letters() == []
        assert len(q) == 3
        assert sorted(drain(q)) == [b"a", b"b", b"c"]
        assert q.requeue_dead() == 0

    def test_requeued_dead_letter_joins_the_end_of_its_line_with_its_priority(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDeadLetterable,))
        assert put(q, kind, b"dead", 2)
        _, ack_id = take_one(q)
        assert q.dead_letter(ack_id, "boom")
        assert put(q, kind, b"same-priority", 2) and put(q, kind, b"urgent", 1)
        harness.advance(DELAY * 0.6)
        assert put(q, kind, b"lowest", 3)
        assert q.requeue_dead() == 1
        expected = [b"urgent", b"same-priority", b"dead", b"lowest"]
        if not kind.priority:
            expected = [b"same-priority", b"urgent", b"lowest", b"dead"]
        assert drain(q) == expected

    def test_purge_dead_deletes_every_dead_letter_and_returns_how_many(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDeadLetterable,))
        kill(q, kind, b"a")
        kill(q, kind, b"b")
        assert put(q, kind, b"waiting")
        assert q.purge_dead() == 2
        assert q.dead_letters() == []
        assert q.purge_dead() == 0
        assert q.values() == [b"waiting"]

    def test_dead_letters_beyond_the_limit_drop_the_oldest(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, dead_letter_limit=3, needs=(IDeadLetterable,))
        items = [f"job-{i}".encode() for i in range(5)]
        for item in items:
            kill(q, kind, item)
            harness.advance(0.01)
        assert [letter["item"] for letter in q.dead_letters()] == items[2:]

    def test_dead_letters_older_than_the_max_age_are_dropped_when_another_arrives(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, dead_letter_max_age=DELAY, needs=(IDeadLetterable,))
        kill(q, kind, b"old")
        harness.advance(DELAY * 0.6)
        kill(q, kind, b"young")
        harness.advance(DELAY * 0.6)
        kill(q, kind, b"new")
        assert [letter["item"] for letter in q.dead_letters()] == [b"young", b"new"]

    def test_dead_lettered_job_id_can_be_stored_again(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDeadLetterable, IDedupQueue))
        priority = priority_arg(kind)
        assert q.enqueue_dedup(b"first", "job-1", priority)
        _, ack_id = take_one(q)
        assert q.dead_letter(ack_id, "boom")
        assert q.enqueue_dedup(b"second", "job-1", priority) is True
        assert q.values() == [b"second"]

    def test_dead_letters_are_shared_by_objects_on_one_name_only(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IDeadLetterable)
        name = fresh_name()
        q, other, elsewhere = (
            self.open(harness, kind, name),
            self.open(harness, kind, name),
            self.open(harness, kind),
        )
        kill(q, kind, b"a")
        assert [letter["item"] for letter in other.dead_letters()] == [b"a"]
        assert elsewhere.dead_letters() == []
        assert elsewhere.requeue_dead() == 0
        assert other.requeue_dead() == 1
        assert q.dead_letters() == []
        assert take(q) == b"a"

    # -- stats -------------------------------------------------------------------------------

    def test_stats_count_waiting_and_in_flight_jobs(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IQueueStats,))
        assert q.stats() == {
            "waiting": 0,
            "in_flight": 0,
            "delayed": 0,
            "dead": 0,
            "oldest_age": 0,
        }
        for item in (b"a", b"b", b"c"):
            assert put(q, kind, item)
        take_one(q)
        stats = q.stats()
        assert set(stats) == {"waiting", "in_flight", "delayed", "dead", "oldest_age"}
        assert (stats["waiting"], stats["in_flight"]) == (2, 1)
        assert (stats["delayed"], stats["dead"]) == (0, 0)

    def test_stats_count_a_job_whose_lease_expired_as_waiting(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, lease=LEASE, needs=(IQueueStats, ILeaseExtendable))
        assert put(q, kind, b"a")
        take_one(q)
        harness.advance(LEASE * 1.2)
        stats = q.stats()
        assert (stats["waiting"], stats["in_flight"]) == (1, 0)

    def test_stats_oldest_age_is_the_age_of_the_oldest_waiting_job(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IQueueStats,))
        assert put(q, kind, b"older")
        harness.advance(0.3)
        assert put(q, kind, b"newer")
        harness.advance(0.3)
        assert 0.6 - 0.01 <= q.stats()["oldest_age"] < 0.6 + 1.0
        assert take_one(q)[0] == b"older"
        assert 0.3 - 0.01 <= q.stats()["oldest_age"] < 0.3 + 1.0
        take_one(q)
        assert q.stats()["oldest_age"] == 0

    def test_stats_count_delayed_jobs_until_they_are_due(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IQueueStats, IDelayedEnqueue, INackable))
        assert _delay(q, kind, b"delayed", DELAY)
        assert put(q, kind, b"nacked")
        _, ack_id = take_one(q)
        assert q.nack(ack_id, DELAY)
        stats = q.stats()
        assert (stats["waiting"], stats["in_flight"], stats["delayed"]) == (0, 0, 2)
        assert stats["oldest_age"] == 0
        harness.advance(DELAY * 1.2)
        stats = q.stats()
        assert (stats["waiting"], stats["delayed"]) == (2, 0)

    def test_stats_count_dead_letters(self, harness: StorageHarness, kind: QueueKind) -> None:
        q = self.open(harness, kind, needs=(IQueueStats, IDeadLetterable))
        kill(q, kind, b"a")
        kill(q, kind, b"b")
        stats = q.stats()
        assert (stats["waiting"], stats["in_flight"], stats["dead"]) == (0, 0, 2)
        assert q.purge_dead() == 2
        assert q.stats()["dead"] == 0
