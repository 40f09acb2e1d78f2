"""In-memory topics: publish and subscribe, the iterators, unsubscribe, slow subscribers under
each policy, idempotent publishes, and bindings into queue handles (in memory and storage)."""

from __future__ import annotations

import asyncio
import statistics
import threading
import time
from typing import Any

import pytest

import varmq
from varmq.contract.topic_names import copy_id
from varmq.testing import MemoryStorage

WAIT = 10.0


def drain(subscription: varmq.Subscription) -> list[Any]:
    """The data of every message waiting in ``subscription`` now."""
    got = []
    while (message := subscription.get(0)) is not None:
        got.append(message.data)
    return got


# -- publish and subscribe ------------------------------------------------------------------


def test_publish_gives_a_copy_to_every_matching_subscriber_and_counts_them() -> None:
    topics = varmq.new_topics()
    eu = topics.subscribe("orders.eu.*")
    every = topics.subscribe("orders.#")
    payments = topics.subscribe("payments.#")
    assert topics.publish("orders.eu.created", {"id": 1}) == 2
    assert topics.publish("orders.us.created", {"id": 2}) == 1
    assert topics.publish("nothing.matches", 3) == 0
    assert drain(eu) == [{"id": 1}]
    assert drain(every) == [{"id": 1}, {"id": 2}]
    assert drain(payments) == []


def test_a_message_says_its_name_data_and_message_id() -> None:
    topics = varmq.new_topics()
    subscription = topics.subscribe("#")
    topics.publish("a.b", [1], message_id="m-1")
    topics.publish("a.c", [2])
    assert subscription.get(0) == varmq.Message("a.b", [1], "m-1")
    message = subscription.get(0)
    assert message is not None
    assert (message.name, message.data, message.message_id) == ("a.c", [2], None)


def test_every_subscriber_gets_the_messages_in_publish_order() -> None:
    topics = varmq.new_topics()
    subscriptions = [topics.subscribe("n.#") for _ in range(3)]
    for i in range(500):
        topics.publish(f"n.{i % 7}", i)
    for subscription in subscriptions:
        assert drain(subscription) == list(range(500))


def test_a_subscriber_added_later_gets_only_later_publishes() -> None:
    topics = varmq.new_topics()
    first = topics.subscribe("t")
    topics.publish("t", 1)
    second = topics.subscribe("t")
    topics.publish("t", 2)
    assert drain(first) == [1, 2]
    assert drain(second) == [2]


def test_sync_iteration_waits_for_messages_and_ends_after_unsubscribe() -> None:
    topics = varmq.new_topics()
    subscription = topics.subscribe("jobs.*")
    got: list[Any] = []
    done = threading.Event()

    def read() -> None:
        got.extend(message.data for message in subscription)
        done.set()

    reader = threading.Thread(target=read)
    reader.start()
    for i in range(100):
        topics.publish("jobs.x", i)
    assert subscription.unsubscribe() is True
    assert done.wait(WAIT), "iteration did not end after unsubscribe"
    reader.join(WAIT)
    assert got == list(range(100))
    assert subscription.unsubscribe() is False
    assert not subscription.active
    assert topics.publish("jobs.x", 100) == 0


def test_async_iteration_waits_without_blocking_the_loop_and_ends_after_unsubscribe() -> None:
    topics = varmq.new_topics()
    subscription = topics.subscribe("jobs.*")

    async def main() -> tuple[list[Any], int]:
        ticks = 0
        stop = asyncio.Event()

        async def tick() -> None:
            nonlocal ticks
            while not stop.is_set():
                ticks += 1
                await asyncio.sleep(0)

        ticker = asyncio.create_task(tick())

        def publish() -> None:
            for i in range(50):
                topics.publish("jobs.x", i)
            subscription.unsubscribe()

        loop = asyncio.get_running_loop()
        publisher = loop.run_in_executor(None, publish)
        got = [message.data async for message in subscription]
        await publisher
        stop.set()
        await ticker
        return got, ticks

    got, ticks = asyncio.run(asyncio.wait_for(main(), WAIT))
    assert got == list(range(50))
    assert ticks > 0  # the loop ran other tasks while the iterator waited


def test_get_gives_none_when_nothing_comes_in_time() -> None:
    topics = varmq.new_topics()
    subscription = topics.subscribe("t")
    started = time.monotonic()
    assert subscription.get(0.05) is None
    assert time.monotonic() - started >= 0.04
    assert asyncio.run(subscription.get_async(0.01)) is None


def test_a_waiting_reader_wakes_for_a_publish_from_another_thread() -> None:
    topics = varmq.new_topics()
    subscription = topics.subscribe("t")
    got: list[Any] = []
    reader = threading.Thread(target=lambda: got.append(subscription.get(WAIT)))
    reader.start()
    while not topics._watched:  # the reader waits inside get
        time.sleep(0.001)
    topics.publish("t", "hello")
    reader.join(WAIT)
    assert got and got[0].data == "hello"


def test_with_block_unsubscribes_and_buffered_messages_can_still_be_read() -> None:
    topics = varmq.new_topics()
    with topics.subscribe("t") as subscription:
        topics.publish("t", 1)
    assert not subscription.active
    assert len(subscription) == 1
    assert list(subscription) == [varmq.Message("t", 1, None)]


def test_eight_publishers_and_four_readers_deliver_every_message_once_to_each_subscriber() -> None:
    topics = varmq.new_topics()
    subscriptions = [topics.subscribe("load.#", max_pending=50) for _ in range(2)]
    seen: list[list[int]] = [[], []]
    lock = threading.Lock()

    def read(index: int) -> None:
        for message in subscriptions[index]:
            with lock:
                seen[index].append(message.data)

    readers = [threading.Thread(target=read, args=(i % 2,)) for i in range(4)]
    for reader in readers:
        reader.start()

    def publish(p: int) -> None:
        for i in range(2_000):
            topics.publish(f"load.{p}", p * 2_000 + i)

    publishers = [threading.Thread(target=publish, args=(p,)) for p in range(8)]
    for publisher in publishers:
        publisher.start()
    for publisher in publishers:
        publisher.join(WAIT * 3)
    for subscription in subscriptions:
        subscription.unsubscribe()
    for reader in readers:
        reader.join(WAIT)
    for index in range(2):
        assert sorted(seen[index]) == list(range(16_000))
        stats = subscriptions[index].stats()
        assert stats["received"] == stats["taken"] == 16_000
        assert stats["dropped"] == stats["refused"] == stats["pending"] == 0


def test_subscribe_checks_its_options() -> None:
    topics = varmq.new_topics()
    with pytest.raises(ValueError, match="on_full must be one of"):
        topics.subscribe("t", on_full="wait")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_pending must be >= 1"):
        topics.subscribe("t", max_pending=0)
    with pytest.raises(TypeError, match="max_pending must be an int"):
        topics.subscribe("t", max_pending=1.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="block_timeout"):
        topics.subscribe("t", block_timeout=-1)
    with pytest.raises(TypeError, match="dedup_window must be an int"):
        varmq.new_topics(dedup_window=None)  # type: ignore[arg-type]


# -- slow subscribers -----------------------------------------------------------------------


def _stuck_and_fast(
    topics: varmq.Topics, on_full: varmq.OnFull, **options: Any
) -> tuple[varmq.Subscription, list[varmq.Subscription], list[list[Any]], list[threading.Thread]]:
    """One subscriber nobody reads, and two read by threads of their own."""
    stuck = topics.subscribe("s.#", max_pending=10, on_full=on_full, name="stuck", **options)
    fast = [topics.subscribe("s.#", max_pending=10, name=f"fast-{i}") for i in range(2)]
    got: list[list[Any]] = [[], []]

    def read(index: int) -> None:
        got[index].extend(message.data for message in fast[index])

    readers = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for reader in readers:
        reader.start()
    return stuck, fast, got, readers


def _finish(fast: list[varmq.Subscription], readers: list[threading.Thread]) -> None:
    for subscription in fast:
        subscription.unsubscribe()
    for reader in readers:
        reader.join(WAIT)


@pytest.mark.parametrize("on_full", ["drop_oldest", "drop_newest"])
def test_a_stuck_dropping_subscriber_slows_no_one_and_counts_what_it_dropped(
    on_full: varmq.OnFull,
) -> None:
    topics = varmq.new_topics()
    stuck, fast, got, readers = _stuck_and_fast(topics, on_full)
    total = 500
    for i in range(total):
        assert topics.publish("s.x", i) == (2 if on_full == "drop_newest" and i >= 10 else 3)
    _finish(fast, readers)
    assert got == [list(range(total))] * 2
    kept = list(range(total - 10, total)) if on_full == "drop_oldest" else list(range(10))
    assert drain(stuck) == kept
    assert stuck.dropped == total - 10
    stats = stuck.stats()
    assert stats["received"] == total
    assert stats["taken"] + stats["pending"] + stats["dropped"] + stats["refused"] == total
    assert (stats["taken"], stats["dropped"], stats["refused"]) == (10, total - 10, 0)
    for subscription in fast:
        s = subscription.stats()
        assert (s["received"], s["taken"], s["dropped"]) == (total, total, 0)


def test_a_stuck_blocking_subscriber_makes_publish_raise_after_the_others_got_their_copy() -> None:
    topics = varmq.new_topics()
    stuck, fast, got, readers = _stuck_and_fast(topics, "block", block_timeout=0.01)
    total = 30
    failures = []
    for i in range(total):
        try:
            assert topics.publish("s.x", i) == 3
        except varmq.SubscriberFullError as exc:
            failures.append(i)
            assert exc.subscribers == ("stuck",)
            assert exc.topic == "s.x" and exc.copies == 2
            assert "'stuck'" in str(exc) and "'s.x'" in str(exc)
    _finish(fast, readers)
    assert failures == list(range(10, total))
    assert got == [list(range(total))] * 2
    assert drain(stuck) == list(range(10))
    stats = stuck.stats()
    assert (stats["received"], stats["taken"], stats["dropped"], stats["refused"]) == (
        total,
        10,
        0,
        total - 10,
    )


def test_a_blocked_publish_goes_on_as_soon_as_the_slow_subscriber_reads() -> None:
    topics = varmq.new_topics()
    slow = topics.subscribe("t", max_pending=1)
    topics.publish("t", 1)
    done = threading.Event()
    publisher = threading.Thread(target=lambda: (topics.publish("t", 2), done.set()))
    publisher.start()
    assert not done.wait(0.05)  # waiting for room
    assert slow.get(0) == varmq.Message("t", 1, None)
    assert done.wait(WAIT)
    publisher.join(WAIT)
    assert drain(slow) == [2]


def test_unsubscribing_a_full_subscriber_releases_a_publisher_waiting_for_it() -> None:
    topics = varmq.new_topics()
    slow = topics.subscribe("t", max_pending=1)
    other = topics.subscribe("t")
    topics.publish("t", 1)
    result: list[int] = []
    publisher = threading.Thread(target=lambda: result.append(topics.publish("t", 2)))
    publisher.start()
    while not slow._sub.blocked:
        time.sleep(0.001)
    slow.unsubscribe()
    publisher.join(WAIT)
    assert result == [1]  # the other subscriber's copy; the one that left is not an error
    assert drain(other) == [1, 2]


def test_the_publisher_latency_with_a_stuck_dropping_subscriber_stays_flat() -> None:
    """No absolute speed is asserted: the median publish with a subscriber stuck for the whole
    run is compared with the median publish when nobody is stuck, in the same process."""

    def median_publish(stuck: bool, on_full: varmq.OnFull) -> float:
        topics = varmq.new_topics()
        readers = [topics.subscribe("p.#", max_pending=100_000) for _ in range(2)]
        topics.subscribe("p.#", max_pending=10 if stuck else 100_000, on_full=on_full)
        times = []
        for i in range(5_000):
            started = time.perf_counter()
            topics.publish("p.x", i)
            times.append(time.perf_counter() - started)
        assert all(len(r) == 5_000 for r in readers)
        return statistics.median(times)

    for on_full in ("drop_oldest", "drop_newest"):
        free = min(median_publish(False, on_full) for _ in range(3))
        stuck = min(median_publish(True, on_full) for _ in range(3))
        assert stuck < free * 5, (on_full, stuck, free)


# -- idempotency ----------------------------------------------------------------------------


def test_a_message_id_published_again_makes_no_second_copy() -> None:
    topics = varmq.new_topics()
    subscription = topics.subscribe("t.#")
    assert topics.publish("t.a", 1, message_id="m-1") == 1
    assert topics.publish("t.a", 1, message_id="m-1") == 0
    assert topics.publish("t.b", 2, message_id="m-1") == 0  # the id, not the name, counts
    assert topics.publish("t.a", 3, message_id="m-2") == 1
    assert drain(subscription) == [1, 3]


def test_only_the_last_dedup_window_ids_are_remembered() -> None:
    topics = varmq.new_topics(dedup_window=3)
    subscription = topics.subscribe("t")
    for i in range(4):
        topics.publish("t", i, message_id=f"m-{i}")
    assert topics.publish("t", "again", message_id="m-3") == 0  # within the last 3
    assert topics.publish("t", "again", message_id="m-0") == 1  # forgotten
    assert len(topics._seen) == 3
    assert drain(subscription) == [0, 1, 2, 3, "again"]


def test_a_dedup_window_of_zero_remembers_nothing() -> None:
    topics = varmq.new_topics(dedup_window=0)
    subscription = topics.subscribe("t")
    assert topics.publish("t", 1, message_id="m") == 1
    assert topics.publish("t", 1, message_id="m") == 1
    assert drain(subscription) == [1, 1]


def test_a_message_id_must_be_a_non_empty_str() -> None:
    topics = varmq.new_topics()
    for bad in ("", 5, b"m"):
        with pytest.raises(TypeError, match="message_id must be a non-empty str"):
            topics.publish("t", 1, message_id=bad)  # type: ignore[arg-type]


def test_a_publish_retried_after_a_full_subscriber_makes_only_the_missing_copy() -> None:
    topics = varmq.new_topics()
    fast = topics.subscribe("t")
    slow = topics.subscribe("t", max_pending=1, block_timeout=0.01, name="slow")
    topics.publish("t", "first")
    with pytest.raises(varmq.SubscriberFullError):
        topics.publish("t", "second", message_id="m-2")
    assert slow.get(0) == varmq.Message("t", "first", None)
    assert topics.publish("t", "second", message_id="m-2") == 1  # the slow one's, only
    assert topics.publish("t", "second", message_id="m-2") == 0
    assert drain(fast) == ["first", "second"]
    assert drain(slow) == ["second"]


# -- bindings -------------------------------------------------------------------------------


def test_a_binding_routes_matching_publishes_into_an_in_memory_queue() -> None:
    topics = varmq.new_topics()
    ran: list[tuple[str, Any]] = []
    done = threading.Event()

    def record(job: varmq.Job[Any]) -> None:
        ran.append((job.id, job.data))
        if len(ran) == 2:
            done.set()

    worker = varmq.new_worker(record, 1)
    queue = worker.bind_queue(name="billing")
    assert topics.bind("orders.#", queue) is True
    assert topics.bind("orders.#", queue) is False
    assert topics.bindings() == [varmq.Binding("orders.#", queue)]
    assert topics.publish("orders.eu.created", "a", message_id="o-1") == 1
    assert topics.publish("payments.x", "b") == 0
    assert topics.publish("orders.us.created", "c") == 1
    assert done.wait(WAIT)
    assert ran == [("o-1@billing", "a"), ("", "c")]
    assert worker.stop_and_wait(WAIT)


def test_a_handle_bound_under_two_matching_patterns_gets_one_copy_per_publish() -> None:
    topics = varmq.new_topics()
    worker = varmq.new_worker(lambda job: None, 1, auto_run=False)
    queue = worker.bind_queue()
    topics.bind("orders.#", queue)
    topics.bind("orders.*.created", queue)
    assert topics.publish("orders.eu.created", 1) == 1
    assert topics.publish("orders.eu", 2) == 1
    assert len(queue) == 2


def test_unbind_stops_the_copies() -> None:
    topics = varmq.new_topics()
    worker = varmq.new_worker(lambda job: None, 1, auto_run=False)
    queue = worker.bind_queue()
    topics.bind("t.#", queue)
    assert topics.unbind("t.#", queue) is True
    assert topics.unbind("t.#", queue) is False
    assert topics.bindings() == []
    assert topics.publish("t.x", 1) == 0
    assert len(queue) == 0


def test_bind_refuses_what_is_not_a_queue_handle() -> None:
    with pytest.raises(TypeError, match="bind needs a queue handle"):
        varmq.new_topics().bind("t", object())


def test_copies_go_to_subscribers_then_bound_queues_and_a_refusing_queue_raises_after() -> None:
    topics = varmq.new_topics()
    worker = varmq.new_worker(lambda job: None, 1, auto_run=False)
    full = worker.bind_queue(capacity=1, name="full")
    roomy = worker.bind_queue(name="roomy")
    subscription = topics.subscribe("t")
    topics.bind("t", full)
    topics.bind("t", roomy)
    assert topics.publish("t", 1, message_id="m-1") == 3
    with pytest.raises(varmq.EnqueueError, match="'full'"):
        topics.publish("t", 2, message_id="m-2")
    assert drain(subscription) == [1, 2]
    assert len(roomy) == 2 and len(full) == 1
    full.purge()
    assert topics.publish("t", 2, message_id="m-2") == 1  # the missing copy only
    assert len(roomy) == 2 and len(full) == 1


def test_a_binding_into_a_storage_queue_stores_a_retried_publish_once_across_processes() -> None:
    storage = MemoryStorage()
    worker = varmq.new_worker(lambda job: None, 1, auto_run=False)
    queue = worker.with_persistent_queue(storage.new_queue("billing"))
    # Two topics objects are two processes: neither remembers what the other published.
    for _ in range(2):
        topics = varmq.new_topics()
        topics.bind("orders.#", queue)
        assert topics.publish("orders.eu.created", {"n": 1}, message_id="o-1") == 1
    assert len(queue) == 1
    consumer = storage.new_queue("billing")
    taken = consumer.dequeue_with_ack_id()
    assert taken is not None
    assert copy_id("o-1", "billing").encode() in taken[0]


def test_stats_lists_every_subscriber_in_subscribe_order() -> None:
    topics = varmq.new_topics()
    a = topics.subscribe("a", name="first")
    topics.subscribe("#", max_pending=5, on_full="drop_newest")
    for _ in range(7):
        topics.publish("a", None)
    a.get(0)
    first, second = topics.stats()
    assert first == {
        "name": "first",
        "pattern": "a",
        "on_full": "block",
        "max_pending": 1000,
        "active": True,
        "received": 7,
        "pending": 6,
        "taken": 1,
        "dropped": 0,
        "refused": 0,
    }
    assert second["name"].startswith("subscriber-")
    assert (second["received"], second["pending"], second["dropped"]) == (7, 5, 2)
    assert "2 subscribers" in repr(topics)
