"""The conformance tests of argument checks and store shape: ``CheckConformance``.

A part of :class:`varmq.testing.conformance.QueueConformance`. Every storage refuses the same
bad arguments with the same exception types (``varmq.contract.protocols``, "Arguments and options"):
``TypeError`` for a value of the wrong type, ``ValueError`` for one out of range, raised before
anything is stored, with a message that names the store, the queue, the argument and its value.
Ack ids are the exception: any unknown one, of any type, gives ``False``. These tests also pin
what a store object offers beside its queues (``location``, ``list_queues``, ``open_queue``)
and the shape of ``stats()``; those need a harness with ``queues()``, as ``QueuesHarness`` has.
"""

from __future__ import annotations

import math
import re
from typing import Any

import pytest

from varmq.contract.protocols import (
    MAX_COUNT,
    MAX_DELAY,
    MAX_PRIORITY,
    MAX_QUEUE_NAME_BYTES,
    MAX_VISIBILITY_TIMEOUT,
    IBatchAcknowledgeable,
    ICapacitySetter,
    ICountedDelivery,
    IDeadLetterable,
    IDedupQueue,
    IDelayedEnqueue,
    ILeaseExtendable,
    IMultiAcknowledgeable,
    INackable,
    IQueueStats,
)
from varmq.testing._suite import (
    FIFO_KINDS,
    PRIORITY_KINDS,
    SuiteBase,
    drain,
    fresh_name,
    kill,
    kinds,
    priority_arg,
    put,
    take_one,
)
from varmq.testing.harness import QueueKind, StorageHarness

__all__ = ["CheckConformance"]

NAN, INF = math.nan, math.inf
BAD_SECONDS_TYPES: tuple[Any, ...] = ("300", b"1", True, None, [1.0])
"""Not seconds at all: ``TypeError`` wherever seconds are expected."""
BAD_DELAYS: tuple[tuple[Any, type[Exception]], ...] = (
    *((bad, TypeError) for bad in ("soon", *BAD_SECONDS_TYPES)),
    *((bad, ValueError) for bad in (NAN, INF, -INF, 1e20, MAX_DELAY * 1.001)),
)
"""What is no delay, and what each raises."""
BAD_COUNT_TYPES: tuple[Any, ...] = (1.5, 2.0, "2", True, None)
"""Not an int: ``TypeError`` wherever a count is expected."""


def _says(*parts: object) -> str:
    """A ``match`` pattern: every part, in this order, anywhere in the message."""
    return ".*".join(re.escape(str(part)) for part in parts)


def _refused(error: type[Exception], argument: str, value: object) -> Any:
    """``pytest.raises(error)`` for a message naming ``argument`` and ``value``."""
    return pytest.raises(error, match=_says(argument, repr(value)))


class CheckConformance(SuiteBase):
    """Tests of argument checks, store-level calls and the shape of stats."""

    # -- queue names -------------------------------------------------------------------------------

    @pytest.mark.parametrize("name", [5, None, b"emails", ["emails"]], ids=repr)
    def test_a_queue_name_that_is_not_a_str_raises_type_error(
        self, harness: StorageHarness, kind: QueueKind, name: Any
    ) -> None:
        with pytest.raises(TypeError, match=_says("queue name", repr(name))):
            harness.new_queue(name, priority=kind.priority, distributed=kind.distributed)

    @pytest.mark.parametrize(
        "name",
        ["", "x" * (MAX_QUEUE_NAME_BYTES + 1), "é" * (MAX_QUEUE_NAME_BYTES // 2 + 1), "a\ud800"],
        ids=["empty", "201-ascii", "202-bytes-of-utf8", "lone-surrogate"],
    )
    def test_an_empty_or_too_long_queue_name_raises_value_error(
        self, harness: StorageHarness, kind: QueueKind, name: str
    ) -> None:
        with pytest.raises(ValueError, match="queue name"):
            self.open(harness, kind, name)

    def test_a_queue_name_of_the_longest_length_is_accepted(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        unique = fresh_name()[-32:]  # 32 ASCII characters
        for name in (unique + "x" * (MAX_QUEUE_NAME_BYTES - 32), unique + "é" * 84):
            assert len(name.encode("utf-8")) == MAX_QUEUE_NAME_BYTES
            q = self.open(harness, kind, name)
            assert put(q, kind, b"a")
            assert drain(q) == [b"a"]

    def test_open_queue_checks_the_name_and_raises_lookup_error_for_an_unknown_one(
        self, harness: StorageHarness
    ) -> None:
        store = self.store(harness)
        with pytest.raises(TypeError, match="queue name"):
            store.open_queue(5)
        with pytest.raises(ValueError, match="queue name"):
            store.open_queue("")
        name = fresh_name()
        with pytest.raises(LookupError, match=re.escape(repr(name))):
            store.open_queue(name)

    # -- the store ---------------------------------------------------------------------------------

    def test_store_location_is_a_str_for_messages(self, harness: StorageHarness) -> None:
        location = self.store(harness).location
        assert isinstance(location, str) and location

    def test_list_queues_names_each_queue_with_its_kind(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        q = self.open(harness, kind, name)
        assert put(q, kind, b"a")  # some stores record a queue on its first enqueue
        expected = "priority" if kind.priority else "fifo"
        assert (name, expected) in self.store(harness).list_queues()

    def test_open_queue_opens_an_existing_queue_as_its_own_kind(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        q = self.open(harness, kind, name)
        assert put(q, kind, b"a", 3)
        opened = self.store(harness).open_queue(name, visibility_timeout=30.0)
        assert callable(opened.subscribe)
        taken = opened.dequeue_with_ack_id()
        assert taken is not None and taken[0] == b"a"
        assert opened.acknowledge(taken[1])
        assert put(opened, kind, b"b", 1)  # the shape of enqueue is that of the kind

    def test_opening_a_name_as_the_other_kind_raises_value_error_naming_it(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        assert put(self.open(harness, kind, name), kind, b"a")
        other = QueueKind(not kind.priority, kind.distributed)
        with pytest.raises(ValueError, match=re.escape(repr(name))):
            self.open(harness, other, name)

    # -- queue options -----------------------------------------------------------------------------

    def test_an_unknown_option_raises_type_error_naming_it(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        with pytest.raises(TypeError, match="no_such_option"):
            self.open(harness, kind, no_such_option=1)

    def test_visibility_timeout_must_be_seconds_above_zero_up_to_seven_days(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        for bad in BAD_SECONDS_TYPES:
            with _refused(TypeError, "visibility_timeout", bad):
                self.open(harness, kind, lease=bad)
        for bad in (0, 0.0, -1.0, NAN, INF, -INF, MAX_VISIBILITY_TIMEOUT + 1):
            with _refused(ValueError, "visibility_timeout", bad):
                self.open(harness, kind, lease=bad)
        for good in (0.001, 1, MAX_VISIBILITY_TIMEOUT):
            assert self.open(harness, kind, lease=good).lease_seconds == pytest.approx(good)

    def test_dead_letter_limit_must_be_an_int_of_at_least_one(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IDeadLetterable)
        for bad in BAD_COUNT_TYPES:
            with _refused(TypeError, "dead_letter_limit", bad):
                self.open(harness, kind, dead_letter_limit=bad)
        for bad in (0, -1, MAX_COUNT + 1):
            with _refused(ValueError, "dead_letter_limit", bad):
                self.open(harness, kind, dead_letter_limit=bad)
        self.open(harness, kind, dead_letter_limit=1)
        self.open(harness, kind, dead_letter_limit=MAX_COUNT)

    def test_dead_letter_max_age_must_be_seconds_above_zero_up_to_a_century(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IDeadLetterable)
        for bad in BAD_SECONDS_TYPES:
            with _refused(TypeError, "dead_letter_max_age", bad):
                self.open(harness, kind, dead_letter_max_age=bad)
        for bad in (0, -1.0, NAN, INF, MAX_DELAY * 1.001):
            with _refused(ValueError, "dead_letter_max_age", bad):
                self.open(harness, kind, dead_letter_max_age=bad)
        q = self.open(harness, kind, dead_letter_max_age=MAX_DELAY)
        kill(q, kind, b"a")  # pruning with the longest age works too
        assert [letter["item"] for letter in q.dead_letters()] == [b"a"]

    def test_an_option_error_names_the_store_the_queue_the_option_and_the_value(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        name = fresh_name()
        location = self.store(harness).location
        with pytest.raises(ValueError) as too_short:
            self.open(harness, kind, name, lease=0)
        with pytest.raises(TypeError) as not_seconds:
            self.open(harness, kind, name, lease="1")  # type: ignore[arg-type]
        for caught, said in ((too_short, "visibility_timeout=0"), (not_seconds, "='1'")):
            message = str(caught.value)
            assert location in message and repr(name) in message and said in message, message

    # -- items, priorities, job ids and ack ids ----------------------------------------------------

    @pytest.mark.parametrize(
        "item",
        [12345, 1.5, {"id": "x"}, ["x"], None, object()],
        # Ids the same in every process (an object's repr holds its address).
        ids=lambda item: type(item).__name__ if type(item) is object else repr(item),
    )
    def test_an_item_that_is_not_bytes_or_str_raises_type_error(
        self, harness: StorageHarness, kind: QueueKind, item: Any
    ) -> None:
        q = self.open(harness, kind, needs=(IDedupQueue, IDelayedEnqueue))
        with pytest.raises(TypeError, match="item"):
            put(q, kind, item)
        with pytest.raises(TypeError, match="item"):
            q.enqueue_dedup(item, "job-1", priority_arg(kind))
        with pytest.raises(TypeError, match="item"):
            q.enqueue_delayed(item, 1.0, None, priority_arg(kind))
        assert len(q) == 0

    def test_a_str_that_utf8_cannot_encode_raises_value_error(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        with pytest.raises(ValueError, match="item"):
            put(q, kind, "lone \ud800 surrogate")
        assert len(q) == 0

    def test_bytearray_memoryview_and_str_items_come_back_as_bytes(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind)
        for item in (bytearray(b"array"), memoryview(b"view"), "h\u00e9"):
            assert put(q, kind, item)
        taken = drain(q)
        assert taken == [b"array", b"view", "h\u00e9".encode()]
        assert all(type(item) is bytes for item in taken)

    @kinds(PRIORITY_KINDS)
    def test_a_priority_that_is_not_an_int_raises_type_error(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDedupQueue, IDelayedEnqueue))
        for bad in (1.5, 2.0, "1", True, None):
            with _refused(TypeError, "priority", bad):
                q.enqueue(b"a", bad)
        for bad in (1.5, "1", False):
            with _refused(TypeError, "priority", bad):
                q.enqueue_dedup(b"a", "job-1", bad)
            with _refused(TypeError, "priority", bad):
                q.enqueue_delayed(b"a", 0, None, bad)
        assert len(q) == 0

    @kinds(PRIORITY_KINDS)
    def test_a_priority_beyond_two_to_the_53_raises_value_error(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDedupQueue, IDelayedEnqueue))
        for bad in (MAX_PRIORITY + 1, -MAX_PRIORITY - 1, 2**63, -(2**64)):
            with _refused(ValueError, "priority", bad):
                q.enqueue(b"a", bad)
            with _refused(ValueError, "priority", bad):
                q.enqueue_dedup(b"a", "job-1", bad)
            with _refused(ValueError, "priority", bad):
                q.enqueue_delayed(b"a", 0, None, bad)
        assert len(q) == 0
        assert q.enqueue(b"last", MAX_PRIORITY) and q.enqueue(b"first", -MAX_PRIORITY)
        assert q.enqueue(b"middle", MAX_PRIORITY - 1)
        assert drain(q) == [b"first", b"middle", b"last"]

    @kinds(PRIORITY_KINDS)
    def test_a_priority_of_none_means_zero_for_dedup_and_delayed_enqueues(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDedupQueue, IDelayedEnqueue))
        assert q.enqueue(b"after", 1) and q.enqueue(b"before", -1)
        assert q.enqueue_dedup(b"dedup", "job-1", None)
        assert q.enqueue_delayed(b"delayed", 0, None, None)
        assert drain(q) == [b"before", b"dedup", b"delayed", b"after"]

    @kinds(FIFO_KINDS)
    def test_fifo_queues_ignore_the_priority_argument(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDedupQueue, IDelayedEnqueue))
        assert q.enqueue_dedup(b"a", "job-1", 7)
        assert q.enqueue_delayed(b"b", 0, None, -7)
        assert q.enqueue_dedup(b"c", "job-2", "not a priority")
        assert drain(q) == [b"a", b"b", b"c"]

    def test_a_job_id_must_be_a_non_empty_str(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDedupQueue, IDelayedEnqueue))
        priority = priority_arg(kind)
        for bad in (5, None, b"job-1", ["job-1"]):
            with _refused(TypeError, "job_id", bad):
                q.enqueue_dedup(b"a", bad, priority)
        for bad in (5, b"job-1"):
            with _refused(TypeError, "job_id", bad):
                q.enqueue_delayed(b"a", 1.0, bad, priority)
        for empty in ("", "lone \ud800"):
            with pytest.raises(ValueError, match="job_id"):
                q.enqueue_dedup(b"a", empty, priority)
            with pytest.raises(ValueError, match="job_id"):
                q.enqueue_delayed(b"a", 1.0, empty, priority)
        assert len(q) == 0
        if IQueueStats in self.extensions:
            assert q.stats()["delayed"] == 0

    def test_an_ack_id_that_is_not_a_str_is_unknown(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(
            harness,
            kind,
            needs=(IMultiAcknowledgeable, ILeaseExtendable, INackable, IDeadLetterable),
        )
        assert put(q, kind, b"a")
        _, ack_id = take_one(q)
        for bad in (5, None, ack_id.encode(), [ack_id]):
            assert q.acknowledge(bad) is False
            assert q.acknowledge_many([bad]) == [False]
            assert q.extend_lease(bad) is False
            assert q.nack(bad, 0) is False
            assert q.dead_letter(bad, "boom") is False
        assert q.acknowledge_many([5, ack_id]) == [False, True]

    # -- delays ------------------------------------------------------------------------------------

    def test_a_delay_that_is_no_number_or_nan_infinite_or_too_long_raises_and_stores_nothing(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDelayedEnqueue, IQueueStats))
        for bad, error in BAD_DELAYS:
            with _refused(error, "delay", bad):
                q.enqueue_delayed(b"a", bad, None, priority_arg(kind))
        stats = q.stats()
        assert (stats["waiting"], stats["delayed"]) == (0, 0)

    def test_the_longest_delay_is_accepted_and_a_huge_negative_one_means_now(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDelayedEnqueue, IQueueStats))
        assert q.enqueue_delayed(b"far", MAX_DELAY, None, priority_arg(kind))
        assert q.enqueue_delayed(b"now", -1e300, None, priority_arg(kind))
        stats = q.stats()
        assert (stats["waiting"], stats["delayed"]) == (1, 1)
        assert drain(q) == [b"now"]

    def test_nack_with_a_bad_delay_raises_and_keeps_the_lease(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(INackable,))
        assert put(q, kind, b"a")
        _, ack_id = take_one(q)
        for bad, error in BAD_DELAYS:
            with _refused(error, "delay", bad):
                q.nack(ack_id, bad)
        assert q.dequeue_with_ack_id() is None  # still leased
        assert q.acknowledge(ack_id) is True

    def test_a_delay_below_a_millisecond_still_delays(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDelayedEnqueue, INackable))
        assert q.enqueue_delayed(b"a", 0.0004, None, priority_arg(kind))
        assert len(q) == 0
        harness.advance(0.001)
        _, ack_id = take_one(q)
        assert q.nack(ack_id, 0.0004)
        assert len(q) == 0
        harness.advance(0.001)
        assert drain(q) == [b"a"]

    # -- counts ------------------------------------------------------------------------------------

    def test_set_capacity_takes_an_int_of_at_least_zero(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(ICapacitySetter,))
        for bad in BAD_COUNT_TYPES:
            with _refused(TypeError, "capacity", bad):
                q.set_capacity(bad)
        for bad in (-1, MAX_COUNT + 1):
            with _refused(ValueError, "capacity", bad):
                q.set_capacity(bad)
        q.set_capacity(MAX_COUNT)
        assert put(q, kind, b"a")

    def test_dead_letters_limit_is_an_int_of_at_least_zero(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDeadLetterable,))
        kill(q, kind, b"a")
        for bad in BAD_COUNT_TYPES:
            with _refused(TypeError, "limit", bad):
                q.dead_letters(bad)
        for bad in (-1, MAX_COUNT + 1):
            with _refused(ValueError, "limit", bad):
                q.dead_letters(bad)
        assert q.dead_letters(0) == []
        assert [letter["item"] for letter in q.dead_letters(MAX_COUNT)] == [b"a"]

    def test_a_batch_size_is_an_int_and_none_or_fewer_take_nothing(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IBatchAcknowledgeable, ICountedDelivery))
        for item in (b"a", b"b"):
            assert put(q, kind, item)
        for bad in BAD_COUNT_TYPES:
            with _refused(TypeError, "n", bad):
                q.dequeue_batch_with_ack_ids(bad)
            with _refused(TypeError, "n", bad):
                q.dequeue_batch_with_attempts(bad)
        with _refused(ValueError, "n", MAX_COUNT + 1):
            q.dequeue_batch_with_ack_ids(MAX_COUNT + 1)
        assert q.dequeue_batch_with_ack_ids(0) == [] and q.dequeue_batch_with_attempts(-1) == []
        assert [item for item, _ in q.dequeue_batch_with_ack_ids(MAX_COUNT)] == [b"a", b"b"]

    # -- dead letters ------------------------------------------------------------------------------

    def test_requeue_dead_refuses_one_str_or_bytes_and_keys_that_are_not_str(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDeadLetterable,))
        key = kill(q, kind, b"a")
        for bad in (key, key.encode(), 5, [5], [key, None]):
            with pytest.raises(TypeError, match="key"):
                q.requeue_dead(bad)
        assert len(q.dead_letters()) == 1
        assert q.requeue_dead([]) == 0
        assert q.requeue_dead(("no-such-key",)) == 0
        assert q.requeue_dead(k for k in [key]) == 1
        assert drain(q) == [b"a"]

    def test_an_error_text_utf8_cannot_encode_is_kept_with_the_bad_characters_escaped(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IDeadLetterable,))
        kill(q, kind, b"a", "bad file \udcff name")
        [letter] = q.dead_letters()
        assert letter["error"] == "bad file \\udcff name"

    # -- stats -------------------------------------------------------------------------------------

    def test_stats_are_four_int_counts_and_a_float_oldest_age(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IQueueStats,))
        assert put(q, kind, b"a")
        harness.advance(0.25)
        for stats in (q.stats(), self.open(harness, kind).stats()):
            assert set(stats) == {"waiting", "in_flight", "delayed", "dead", "oldest_age"}
            counts = [stats[key] for key in ("waiting", "in_flight", "delayed", "dead")]
            assert all(type(count) is int for count in counts), stats
            assert type(stats["oldest_age"]) is float, stats

    def test_stats_keep_their_shape_once_the_store_is_closed(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IQueueStats,))
        assert put(q, kind, b"a")
        harness.close()
        stats = q.stats()
        assert set(stats) == {"waiting", "in_flight", "delayed", "dead", "oldest_age"}
        assert all(type(stats[key]) is int for key in ("waiting", "in_flight", "delayed", "dead"))
        assert type(stats["oldest_age"]) is float
