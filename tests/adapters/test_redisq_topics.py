"""redisq's topics beyond the conformance suite: a stopped and restarted server, bindings
changed by another process between two publishes, and copies spread over a Redis Cluster."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from redis.cluster import RedisCluster
from redis.crc import key_slot

import redisq
from redisq._keys import queue_keys
from tests.adapters.conftest import Backend
from tests.support.redis_server import RedisClusterNodes
from varmq.contract import envelope

WAIT = 10.0


def _eventually(predicate: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _names_on_every_node(cluster: RedisClusterNodes) -> list[str]:
    """Fresh queue names, one per node of the cluster."""
    found: dict[int, str] = {}
    prefix, i = f"topics-{time.time_ns()}", 0
    while len(found) < len(cluster.nodes):
        name = f"{prefix}-{i}"
        found.setdefault(cluster.port_of_slot(key_slot(queue_keys(name).keys[0].encode())), name)
        i += 1
    return list(found.values())


def _drain(q: redisq.Queue) -> list[envelope.Envelope]:
    got = []
    while (item := q.dequeue()) is not None:
        got.append(envelope.decode(item))
    return got


def test_a_live_subscriber_survives_a_restart_and_receives_what_is_published_after_it(
    stoppable_backend: Backend,
) -> None:
    topics = stoppable_backend.queues().topics()
    live = topics.subscribe("orders.#")
    try:
        topics.publish("orders.eu", "before")
        message = live.get(WAIT)
        assert message is not None and message.data == "before"
        stoppable_backend.stop()
        with pytest.raises(redisq.TopicsUnavailableError, match="Redis at") as caught:
            topics.publish("orders.eu", "while down")
        assert isinstance(caught.value, ConnectionError)
        _eventually(lambda: not live.connected, "the subscriber did not notice the outage")
        stoppable_backend.start()
        _eventually(lambda: live.reconnects >= 1 and live.connected, "no reconnection")
        assert topics.publish("orders.us", {"after": True}, message_id="m-9") == 0
        message = live.get(WAIT)
        assert message is not None
        assert (message.name, message.data, message.message_id) == (
            "orders.us",
            {"after": True},
            "m-9",
        )
        assert live.active and live.dropped == 0
    finally:
        live.unsubscribe()


def test_every_topic_call_raises_naming_the_server_while_redis_is_down(
    stoppable_backend: Backend,
) -> None:
    topics = stoppable_backend.queues().topics()
    assert topics.bind("t.#", "q")
    stoppable_backend.stop()
    try:
        calls: list[Callable[[], object]] = [
            lambda: topics.publish("t.x", 1),
            lambda: topics.bind("u", "q"),
            lambda: topics.unbind("t.#", "q"),
            topics.bindings,
            lambda: topics.subscribe("t.#"),
        ]
        for call in calls:
            with pytest.raises(redisq.TopicsUnavailableError, match="Redis at"):
                call()
    finally:
        stoppable_backend.start()
    assert topics.publish("t.x", "after") == 1
    assert topics.bindings() == [("t.#", "q")]


def test_a_publish_follows_bindings_another_process_changed_since_the_last_publish(
    backend: Backend,
) -> None:
    ours, theirs = backend.queues().topics(), backend.queues().topics()
    ours.bind("orders.#", "first")
    assert ours.publish("orders.1", 1) == 1  # routed by the bindings it read now
    theirs.bind("orders.*", "second")
    theirs.unbind("orders.#", "first")
    assert ours.publish("orders.2", 2) == 1
    queues = backend.queues()
    assert [e.data for e in _drain(queues.new_queue("first"))] == [1]
    assert [e.data for e in _drain(queues.new_queue("second"))] == [2]


@pytest.mark.parametrize("message_id", [None, "m-1"])
def test_a_copy_gives_a_kind_only_to_a_queue_never_opened_or_enqueued_to(
    backend: Backend, message_id: str | None
) -> None:
    queues = backend.queues()
    word = f"kinds{time.time_ns()}"
    names = [f"{word}-{part}" for part in ("new", "priority", "used")]
    priority = queues.new_priority_queue(names[1])  # opened, never enqueued to
    used = queues.new_priority_queue(names[2])
    used.enqueue(b"first", 5)
    assert used.dequeue() == b"first"
    topics = queues.topics()
    for name in names:
        topics.bind(f"{word}.#", name)
    assert topics.publish(f"{word}.x", "hello", message_id=message_id) == 3
    assert topics.publish(f"{word}.x", "again") == 3
    assert {(n, k) for n, k in queues.list_queues() if n in names} == {
        (names[0], "fifo"),
        (names[1], "priority"),
        (names[2], "priority"),
    }
    assert [e.data for e in _drain(queues.new_queue(names[0]))] == ["hello", "again"]
    for q in (priority, used):
        got = [envelope.decode(p).data for p in iter(q.dequeue, None)]
        assert got == ["hello", "again"]


def test_a_full_blocking_live_subscriber_keeps_every_message_and_never_holds_the_publisher(
    backend: Backend,
) -> None:
    topics = backend.queues().topics()
    live = topics.subscribe("t", max_pending=1, on_full="block")
    try:
        started = time.monotonic()
        for i in range(20):
            topics.publish("t", i)
        assert time.monotonic() - started < WAIT
        got = [m.data for m in (live.get(WAIT) for _ in range(20)) if m is not None]
        assert got == list(range(20)) and live.dropped == 0
    finally:
        live.unsubscribe()


def test_on_a_cluster_copies_land_on_every_node_and_a_retry_stores_nothing_twice(
    redis_cluster: RedisClusterNodes,
) -> None:
    names = _names_on_every_node(redis_cluster)
    client = RedisCluster(host="127.0.0.1", port=redis_cluster.ports[0])
    queues = redisq.new(client)
    try:
        topics = queues.topics()
        word = f"spread{time.time_ns()}"
        for name in names:
            topics.bind(f"{word}.#", name)
        priority = queues.new_priority_queue(names[0])
        mid = f"m-{word}"
        assert topics.publish(f"{word}.x", {"n": 1}, message_id=mid) == len(names)
        assert queues.topics().publish(f"{word}.x", {"n": 1}, message_id=mid) == 0
        taken = priority.dequeue()
        assert taken is not None and envelope.decode(taken).id == f"{mid}@{names[0]}"
        for name in names[1:]:
            got = _drain(queues.new_queue(name))
            assert [(e.id, e.data) for e in got] == [(f"{mid}@{name}", {"n": 1})]
        assert {(n, k) for n, k in queues.list_queues() if n in names} == {
            (names[0], "priority"),
            *((n, "fifo") for n in names[1:]),
        }
    finally:
        queues.close()
        client.close()


def test_ids_names_and_data_with_quotes_slashes_and_unicode_come_through_unchanged(
    backend: Backend,
) -> None:
    topics = backend.queues().topics()
    queue, message_id = 'q "é" {tag}/\\', 'm "1"/\\ é'
    topics.bind("naïve.#", queue)
    live = topics.subscribe("naïve.#")
    try:
        data = {"text": 'say "hi" / \\ — ✓', "list": [1, None, True]}
        assert topics.publish("naïve.ünï", data, message_id=message_id) == 1
        assert topics.publish("naïve.ünï", data) == 1
        got = _drain(backend.queues().new_queue(queue))
        assert len(got) == 2 and (got[0].id, got[0].data) == (f"{message_id}@{queue}", data)
        assert got[1].data == data and got[1].id and got[1].id != got[0].id
        received = [live.get(WAIT), live.get(WAIT)]
        assert [(m.name, m.data, m.message_id) for m in received if m is not None] == [
            ("naïve.ünï", data, message_id),
            ("naïve.ünï", data, None),
        ]
    finally:
        live.unsubscribe()


def test_async_iteration_and_drop_oldest_keep_the_newest_messages(backend: Backend) -> None:
    topics = backend.queues().topics()
    live = topics.subscribe("t.*", max_pending=3, on_full="drop_oldest")

    async def read(count: int) -> list[object]:
        got = []
        async for message in live:
            got.append(message.data)
            if len(got) == count:
                break
        return got

    try:
        for i in range(10):
            topics.publish(f"t.{i}", i)
        topics.publish("other", "not matched")
        _eventually(lambda: live.dropped == 7, f"dropped is {live.dropped}, not 7")
        assert asyncio.run(asyncio.wait_for(read(3), WAIT)) == [7, 8, 9]
        topics.publish("t.last", "last")
        assert asyncio.run(asyncio.wait_for(read(1), WAIT)) == ["last"]
    finally:
        live.unsubscribe()
