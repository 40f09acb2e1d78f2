"""redisq's own claims about job records, on a real redis-server and on fakeredis (``backend``).

The record semantics every storage shares are checked by the conformance suite, on a test
clock. Here: the times and the expiry follow the Redis server's own clock, the keys a record
uses are the queue's (one hash slot) and stay bounded, and every end is published on the
queue's "ended" channel.
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis
from redis.crc import key_slot

import redisq
import varmq
from redisq._keys import queue_keys

if TYPE_CHECKING:
    from tests.adapters.conftest import Backend

WAIT = 5.0


def _server_seconds(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1e6


def test_record_times_are_the_servers_and_an_ended_record_expires_on_its_clock(
    backend: Backend,
) -> None:
    queues = backend.queues()
    q = queues.new_queue("timed", keep_results=0.4)
    raw: redis.Redis = queues._client  # type: ignore[assignment]
    before = _server_seconds(raw)
    assert q.enqueue_dedup(b"a", "job-1")
    _, ack_id = q.dequeue_with_ack_id() or (b"", "")
    assert q.acknowledge_with_results([(ack_id, b'"done"')]) == [True]
    ended = _server_seconds(raw)
    record = q.job_record("job-1")
    assert record is not None and record["state"] == "succeeded"
    assert record["started_at"] is not None and record["finished_at"] is not None
    assert before - 0.01 <= record["enqueued_at"] <= record["started_at"]
    assert record["started_at"] <= record["finished_at"] <= ended + 0.01
    # Kept while keep_results runs on the server's clock, gone right after.
    deadline = time.monotonic() + WAIT
    while q.job_record("job-1") is not None:
        assert time.monotonic() < deadline, "the record was never dropped"
        time.sleep(0.02)
    assert _server_seconds(raw) - record["finished_at"] >= 0.4 - 0.01
    assert q.enqueue_dedup(b"again", "job-1")  # its id is free again
    assert q.job_record("job-1") is not None


def test_record_keys_share_the_queue_slot_and_stay_bounded_by_the_limit(
    backend: Backend,
) -> None:
    queues = backend.queues()
    q = queues.new_queue("bounded {tag}", keep_results=3600, keep_results_limit=5)
    raw: redis.Redis = queues._client  # type: ignore[assignment]
    keys = queue_keys("bounded {tag}")
    for i in range(60):
        assert q.enqueue_dedup(f"job-{i}".encode(), f"job-{i}")
    for _ in range(60):
        taken = q.dequeue_with_ack_id()
        assert taken is not None
        assert q.acknowledge_with_results([(taken[1], b"x" * 100)]) == [True]
    assert [q.job_record(f"job-{i}") is not None for i in range(60)] == [False] * 55 + [True] * 5
    stored = [key.decode() for key in raw.keys("redisq:{bounded %7Btag%7D}:*")]
    assert stored and all(key in keys.keys for key in stored), stored
    assert len({key_slot(key.encode()) for key in keys.keys}) == 1
    assert raw.hlen(keys.records) == 5
    assert raw.hlen(keys.keys[15]) == 5  # outcomes
    assert raw.zcard(keys.keys[16]) == 5  # record_expiry


def test_every_end_is_published_with_its_job_id_on_the_ended_channel(backend: Backend) -> None:
    queues = backend.queues()
    q = queues.new_queue("told", keep_results=60)
    raw: redis.Redis = queues._client  # type: ignore[assignment]
    pubsub = raw.pubsub()
    try:
        pubsub.subscribe(queue_keys("told").records_channel)
        confirmation = pubsub.get_message(timeout=WAIT)
        assert confirmation is not None and confirmation["type"] == "subscribe"
        for job_id in ("ok", "bad", "gone"):
            assert q.enqueue_dedup(job_id.encode(), job_id)
        assert q.cancel("gone")
        ok = q.dequeue_with_ack_id()
        bad = q.dequeue_with_ack_id()
        assert ok is not None and bad is not None
        assert q.acknowledge_with_results([(ok[1], b"1")]) == [True]
        assert q.fail(bad[1], b'{"type": "E"}')
        assert q.enqueue(b"anonymous")  # no id: no record, nothing published when it ends
        anonymous = q.dequeue_with_ack_id()
        assert anonymous is not None and q.acknowledge(anonymous[1])
        heard = []
        while (message := pubsub.get_message(timeout=0.5)) is not None:
            heard.append(message["data"])
        assert heard == [b"gone", b"ok", b"bad"]
    finally:
        pubsub.close()


def test_an_ack_that_ends_several_records_tells_every_job_id_to_subscribers(
    backend: Backend,
) -> None:
    queues = backend.queues()
    q = queues.new_queue("told in one", keep_results=60)
    raw: redis.Redis = queues._client  # type: ignore[assignment]
    heard: list[str] = []
    all_heard = threading.Event()

    def note(job_id: str) -> None:
        heard.append(job_id)
        if len(heard) == 3:
            all_heard.set()

    q.subscribe_records(note)
    pubsub = raw.pubsub()
    try:
        pubsub.subscribe(queue_keys("told in one").records_batch_channel)
        confirmation = pubsub.get_message(timeout=WAIT)
        assert confirmation is not None and confirmation["type"] == "subscribe"
        ids = ['a "quoted" id', "caf\u00e9", "x"]
        for job_id in ids:
            assert q.enqueue_dedup(job_id.encode(), job_id)
        taken = q.dequeue_batch_with_ack_ids(3)
        assert len(taken) == 3
        assert q.acknowledge_with_results([(ack_id, b"1") for _, ack_id in taken]) == [True] * 3
        assert all_heard.wait(WAIT), heard
        assert sorted(heard) == sorted(ids)
        message = pubsub.get_message(timeout=WAIT)
        assert message is not None and json.loads(message["data"]) == ids
    finally:
        pubsub.close()
        queues.close()


def _kill_subscribers(url: str) -> int:
    """Close the pub/sub connections of this test's database, as a network failure would;
    how many."""
    raw = redis.Redis.from_url(url)
    try:
        db = str(raw.connection_pool.connection_kwargs.get("db", 0))
        killed = 0
        for entry in raw.client_list(_type="pubsub"):
            if entry.get("db") == db:
                killed += raw.client_kill_filter(_id=entry["id"])
        return killed
    finally:
        raw.close()


def test_after_a_reconnection_record_listeners_are_told_ends_may_be_lost_and_nothing_else(
    redis_db: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Before: the listener called every callback with "enqueued" after re-subscribing, so the
    # record listener took "enqueued" for a job id and the batch listener logged a
    # JSONDecodeError traceback; waiting result_of calls were not woken.
    queues = redisq.new(redis_db)
    try:
        q = queues.new_distributed_queue("told-again", keep_results=60)
        heard_records: list[str | None] = []
        heard_queue: list[str] = []
        q.subscribe_records(heard_records.append)
        q.subscribe(heard_queue.append)
        listener = queues._listener
        before = listener.confirmations
        assert _kill_subscribers(redis_db) >= 1
        # Three channels of this Queues come back on a new connection.
        assert listener.wait_for(lambda lst: lst.confirmations >= before + 3, WAIT * 4)
        assert heard_records == [None]  # once: "read your records again"
        assert heard_queue == ["enqueued"]  # the queue's subscriber: look at the queue
        assert not [r for r in caplog.records if "JSONDecodeError" in r.getMessage()]
        assert not [r for r in caplog.records if r.exc_info]
    finally:
        queues.close()


def test_a_result_waiter_reads_again_at_once_when_the_listener_reconnects(redis_db: str) -> None:
    queues = redisq.new(redis_db)
    try:
        q = queues.new_distributed_queue("waited", keep_results=60)
        handle = varmq.new_distributed_queue(q)
        handle.add("x", job_id="job-1")
        reads: list[float] = []
        read = q.job_record

        def counted(job_id: str) -> Any:
            reads.append(time.monotonic())
            return read(job_id)

        q.job_record = counted  # type: ignore[method-assign]
        results: list[Any] = []
        waiter = threading.Thread(target=lambda: results.append(handle.result_of("job-1", 30)))
        waiter.start()
        deadline = time.monotonic() + WAIT
        while not reads:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        time.sleep(0.2)  # into its wait: without a wake-up its next read is 5 s away
        count, killed_at = len(reads), time.monotonic()
        assert _kill_subscribers(redis_db) >= 1
        while len(reads) == count:
            assert time.monotonic() - killed_at < 3.0, "the reconnection did not wake the waiter"
            time.sleep(0.01)
        taken = q.dequeue_with_ack_id()
        assert taken is not None and q.acknowledge_with_results([(taken[1], b'"done"')])
        waiter.join(WAIT)
        assert results == ["done"]
    finally:
        queues.close()
