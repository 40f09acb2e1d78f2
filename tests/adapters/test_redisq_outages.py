"""redisq when Redis goes away: every call raises RedisUnavailableError, one warning, recovery.

Run on a redis-server of each test's own (append-only file on, so a restart keeps the jobs, as
in production) and on fakeredis with its connection switched off (``stoppable_backend``).
Notifications are checked here too, since surviving a restart is their hard part.
"""

from __future__ import annotations

import logging
import queue
import re
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import fakeredis
import pytest
import redis

import redisq
from redisq._pubsub import Listener
from tests.support.redis_server import RedisServer

# Run alone by the test command:
# frozen and stopped servers, with bounds on how long a call may take.
pytestmark = pytest.mark.serial

if TYPE_CHECKING:
    from tests.adapters.conftest import Backend

WAIT = 10.0  # seconds; the longest wait for another thread or the server


def _drain(events: queue.Queue[str]) -> list[str]:
    out = []
    while not events.empty():
        out.append(events.get_nowait())
    return out


def _unreachable_warnings(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [
        r
        for r in caplog.records
        if r.name == "redisq" and r.levelno == logging.WARNING and "unreachable" in r.message
    ]


def test_every_call_raises_redis_unavailable_while_redis_is_down_and_works_after(
    stoppable_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="redisq")
    queues = stoppable_backend.queues()
    q = queues.new_distributed_priority_queue("outage", visibility_timeout=60)
    assert q.enqueue(b"a", 1) and q.enqueue(b"b", 2)
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    heard: queue.Queue[str] = queue.Queue()
    ack_id = taken[1]
    calls = {
        "enqueue": lambda: q.enqueue(b"c", 1),
        "enqueue_dedup": lambda: q.enqueue_dedup(b"c", "job-c", 1),
        "enqueue_delayed": lambda: q.enqueue_delayed(b"c", 5.0),
        "enqueue_many": lambda: q.enqueue_many([b"c", b"d"], 1),
        "dequeue": q.dequeue,
        "dequeue_with_ack_id": q.dequeue_with_ack_id,
        "dequeue_batch_with_ack_ids": lambda: q.dequeue_batch_with_ack_ids(3),
        "dequeue_batch_with_attempts": lambda: q.dequeue_batch_with_attempts(3),
        "len": lambda: len(q),
        "values": q.values,
        "purge": q.purge,
        "acknowledge": lambda: q.acknowledge(ack_id),
        "acknowledge_many": lambda: q.acknowledge_many([ack_id, "other"]),
        "extend_lease": lambda: q.extend_lease(ack_id),
        "release": lambda: q.release(ack_id),
        "nack": lambda: q.nack(ack_id, 0),
        "dead_letter": lambda: q.dead_letter(ack_id, "boom"),
        "dead_letters": q.dead_letters,
        "requeue_dead": q.requeue_dead,
        "purge_dead": q.purge_dead,
        "stats": q.stats,
        "subscribe": lambda: q.subscribe(heard.put),
        "new_queue": lambda: queues.new_queue("opened-while-down"),
        "list_queues": queues.list_queues,
        "open_queue": lambda: queues.open_queue("outage"),
    }

    stoppable_backend.stop()
    started = time.monotonic()
    for name, call in calls.items():
        with pytest.raises(redisq.RedisUnavailableError) as raised:
            call()
        message = str(raised.value)
        assert queues.location in message and "unreachable" in message, (name, message)
        assert raised.value.__cause__ is not None, name
    assert time.monotonic() - started < WAIT
    assert len(_unreachable_warnings(caplog)) == 1  # one warning per outage, every call raised

    stoppable_backend.start()
    assert q.acknowledge(ack_id) is True  # the lease outlived the outage; nothing was done
    assert q.values() == [b"b"]
    assert q.stats()["dead"] == 0
    assert q.enqueue(b"c", 0) and q.dequeue() == b"c"
    other = queues.new_queue("opened-while-down")
    assert other.enqueue(b"x") and other.values() == [b"x"]
    assert any("answers again" in r.message for r in caplog.records if r.name == "redisq")
    q.subscribe(heard.put)  # the failed subscribe kept nothing: this one is heard once
    assert q.dequeue_batch_with_ack_ids(10)  # an idle consumer: the next add rings
    producer = stoppable_backend.queues().new_distributed_priority_queue("outage")
    assert producer.enqueue(b"d", 0)
    assert heard.get(timeout=WAIT) == "enqueued"


def test_fenced_and_unknown_leases_still_answer_false_and_closed_queues_answer_empty(
    backend: Backend,
) -> None:
    queues = backend.queues()
    q = queues.new_distributed_queue("fenced")
    assert q.extend_lease("no-such-lease") is False
    assert q.acknowledge("no-such-lease") is False and q.release("no-such-lease") is False
    assert q.enqueue(b"job")
    queues.close()
    assert q.dequeue_batch_with_attempts(1) == [] and len(q) == 0 and q.enqueue(b"x") is False


def test_warning_is_logged_again_for_a_second_outage(
    stoppable_backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    q = stoppable_backend.queues().new_queue("two-outages")
    for _ in range(2):
        stoppable_backend.stop()
        for _ in range(3):
            with pytest.raises(
                redisq.RedisUnavailableError, match="enqueue on queue 'two-outages'"
            ):
                q.enqueue(b"a")
        stoppable_backend.start()
        assert q.enqueue(b"a") is True
    assert len(_unreachable_warnings(caplog)) == 2
    assert q.values() == [b"a", b"a"]


def test_jobs_and_leases_survive_a_redis_restart(stoppable_backend: Backend) -> None:
    q = stoppable_backend.queues().new_priority_queue("restart", visibility_timeout=60)
    assert q.enqueue(b"a", 1) and q.enqueue(b"b", 2) and q.enqueue_dedup(b"c", "job-c", 3)
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    stoppable_backend.restart()
    assert q.acknowledge(taken[1]) is True
    assert q.acknowledge(taken[1]) is False
    assert q.enqueue_dedup(b"c-again", "job-c", 0) is True
    assert q.values() == [b"b", b"c"]


def test_subscription_survives_redis_restarting(stoppable_backend: Backend) -> None:
    queues = stoppable_backend.queues()
    consumer = queues.new_distributed_queue("notify")
    heard: queue.Queue[str] = queue.Queue()
    consumer.subscribe(heard.put)
    producer = stoppable_backend.queues().new_distributed_queue("notify")
    assert producer.enqueue(b"before")
    assert heard.get(timeout=WAIT) == "enqueued"
    listener: Listener = queues._listener
    confirmed = listener.confirmations

    stoppable_backend.stop()
    assert listener.wait_for(lambda it: not it.connected, WAIT)
    stoppable_backend.start()
    assert listener.wait_for(lambda it: it.confirmations > confirmed, WAIT)
    # After a reconnect the listener tells every subscriber to look (messages may be lost).
    assert set(_drain(heard)) == {"enqueued"}

    consumer.dequeue_batch_with_ack_ids(10)  # an idle consumer: the next add rings
    assert producer.enqueue(b"after")
    assert heard.get(timeout=WAIT) == "enqueued"


def test_subscribers_hear_enqueued_from_another_queues_for_both_kinds(backend: Backend) -> None:
    consumers = backend.queues()
    producers = backend.queues()
    fifo_heard, prio_heard = threading.Event(), threading.Event()
    consumers.new_distributed_queue("fifo").subscribe(lambda _: fifo_heard.set())
    consumers.new_distributed_priority_queue("prio").subscribe(lambda _: prio_heard.set())
    assert producers.new_distributed_priority_queue("prio").enqueue(b"x", 3)
    assert prio_heard.wait(WAIT) and not fifo_heard.is_set()
    assert producers.new_distributed_queue("fifo").enqueue_dedup(b"y", "job-y")
    assert fifo_heard.wait(WAIT)


def test_a_subscriber_that_raises_does_not_silence_the_others(
    backend: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    queues = backend.queues()
    q = queues.new_distributed_queue("raising")
    heard = threading.Event()

    def broken(_: str) -> None:
        raise RuntimeError("subscriber bug")

    q.subscribe(broken)
    q.subscribe(lambda _: heard.set())
    for _ in range(2):
        heard.clear()
        assert backend.queues().new_distributed_queue("raising").enqueue(b"x")
        assert heard.wait(WAIT)
        # Take the job: a consumer that found the line empty is rung by the next add.
        assert q.dequeue_batch_with_ack_ids(2)
    assert sum("raised" in r.message for r in caplog.records if r.name == "redisq") == 1


def test_closing_a_distributed_queue_stops_its_subscribers_only(backend: Backend) -> None:
    queues = backend.queues()
    closed, kept = (
        queues.new_distributed_queue("close-sub"),
        queues.new_distributed_queue("close-sub"),
    )
    closed_heard: queue.Queue[str] = queue.Queue()
    kept_heard: queue.Queue[str] = queue.Queue()
    closed.subscribe(closed_heard.put)
    kept.subscribe(kept_heard.put)
    closed.close()
    assert kept.enqueue(b"x")
    assert kept_heard.get(timeout=WAIT) == "enqueued"
    # Both callbacks run on the one listener thread, in order: had the closed queue's callback
    # still been registered, it would have run by now.
    assert closed_heard.empty()


def test_queues_close_stops_the_pubsub_thread(backend: Backend) -> None:
    queues = backend.queues()
    queues.new_distributed_queue("thread").subscribe(lambda _: None)
    listener: Listener = queues._listener
    assert listener.running
    assert any(t.name == "redisq:pubsub" for t in threading.enumerate())
    queues.close()
    assert not listener.running


# -- a frozen Redis: bounded blocking ---------------------------------------------------------

# The documented worst case with the defaults (docs/redisq.md, "Errors and timeouts"):
# (1 + retries) * (connect timeout + socket timeout) + the retry's backoff (at most 0.25 s).
DOCUMENTED_BOUND = (1 + redisq.DEFAULT_RETRIES) * (
    redisq.DEFAULT_CONNECT_TIMEOUT + redisq.DEFAULT_SOCKET_TIMEOUT
) + 0.25
FROZEN_LIMIT = DOCUMENTED_BOUND + 3.0  # generous: two other test runs share the machine


@pytest.fixture
def frozen_server() -> Iterator[RedisServer]:
    """A redis-server of this test's own, to be frozen (SIGSTOP) and thawed by the test."""
    server = RedisServer()
    server.start()
    try:
        yield server
    finally:
        server.close()  # thaws it first


def test_every_call_kind_raises_within_the_documented_bound_while_redis_is_frozen(
    frozen_server: RedisServer,
) -> None:
    queues = redisq.new(frozen_server.url)
    late = redisq.new(frozen_server.url)  # opens its first queue only once Redis is frozen
    q = queues.new_distributed_priority_queue("frozen", visibility_timeout=60)
    assert q.enqueue(b"a", 0) and q.enqueue(b"b", 0)
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    calls = {
        "enqueue": lambda: q.enqueue(b"c", 0),
        "take": lambda: q.dequeue_batch_with_attempts(2),
        "acknowledge": lambda: q.acknowledge(taken[1]),
        "extend_lease": lambda: q.extend_lease(taken[1]),
        "nack": lambda: q.nack(taken[1], 1.0),
        "release": lambda: q.release(taken[1]),
        "len": lambda: len(q),
        "stats": q.stats,
        "dead_letters": q.dead_letters,
        "subscribe": lambda: q.subscribe(lambda _: None),
        "open a queue": lambda: late.new_queue("frozen-open"),
        "list_queues": queues.list_queues,
    }
    took: dict[str, float] = {}
    raised: dict[str, BaseException | None] = {}

    def measure(name: str) -> None:
        started = time.monotonic()
        try:
            calls[name]()
            raised[name] = None
        except BaseException as exc:
            raised[name] = exc
        took[name] = time.monotonic() - started

    frozen_server.freeze()
    try:
        # One thread per call kind, each on its own connection of the pool: they block at once.
        threads = [threading.Thread(target=measure, args=(name,)) for name in calls]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(FROZEN_LIMIT + WAIT)
    finally:
        frozen_server.thaw()
    for name in calls:
        assert isinstance(raised[name], redisq.RedisUnavailableError), (name, raised[name])
        assert took[name] < FROZEN_LIMIT, (name, took[name])
    print("\nfrozen redis-server, seconds until RedisUnavailableError:")
    for name, seconds in sorted(took.items(), key=lambda item: -item[1]):
        print(f"  {name}: {seconds:.2f}")
    # Redis answers again. A call whose command had reached the frozen server before it timed
    # out runs when the server resumes, whole: the two jobs (three with the enqueue) are all
    # there, waiting, leased or acknowledged, never half moved.
    stats = q.stats()
    assert 1 <= stats["waiting"] + stats["in_flight"] + stats["delayed"] <= 3
    queues.close()
    late.close()


def test_shorter_timeouts_make_a_frozen_call_raise_sooner(frozen_server: RedisServer) -> None:
    queues = redisq.new(
        frozen_server.url, socket_connect_timeout=0.2, socket_timeout=0.2, retries=0
    )
    q = queues.new_queue("quick")
    frozen_server.freeze()
    started = time.monotonic()
    try:
        with pytest.raises(redisq.RedisUnavailableError, match="enqueue on queue 'quick'"):
            q.enqueue(b"job")
    finally:
        frozen_server.thaw()
    assert time.monotonic() - started < 1.5
    queues.close()


@pytest.mark.parametrize(
    ("options", "error", "named"),
    [
        ({"socket_timeout": 0}, ValueError, "socket_timeout=0"),
        ({"socket_timeout": float("nan")}, ValueError, "socket_timeout=nan"),
        ({"socket_connect_timeout": "1"}, TypeError, "socket_connect_timeout='1'"),
        ({"socket_connect_timeout": 7200}, ValueError, "socket_connect_timeout=7200"),
        ({"retries": -1}, ValueError, "retries=-1"),
        ({"retries": True}, TypeError, "retries=True"),
        ({"retries": 1.0}, TypeError, "retries=1.0"),
        ({"check_eviction": "no"}, TypeError, "check_eviction='no'"),
    ],
)
def test_connection_options_are_checked_and_errors_name_the_option(
    options: dict[str, object], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=re.escape(named)):
        redisq.new("redis://127.0.0.1:1/0", **options)  # type: ignore[arg-type]
    with pytest.raises(error, match=re.escape(named)):
        redisq.open_url("redis://127.0.0.1:1/0", **options)  # type: ignore[arg-type]


def test_connection_options_with_a_client_passed_in_are_refused_naming_them() -> None:
    client = fakeredis.FakeRedis()
    with pytest.raises(ValueError, match="socket_timeout, retries apply to a client redisq"):
        redisq.new(client, socket_timeout=1.0, retries=0)


def test_a_full_redis_with_noeviction_refuses_an_enqueue_loudly_and_keeps_every_job() -> None:
    server = RedisServer(extra_args=("--maxmemory", "4mb", "--maxmemory-policy", "noeviction"))
    server.start()
    try:
        with redisq.new(server.url) as queues:
            q = queues.new_queue("full")
            payload = b"x" * 256 * 1024
            stored = 0
            with pytest.raises(redisq.RedisUnavailableError, match="refused") as refused:
                for _ in range(64):  # 16 MB: far beyond the limit
                    assert q.enqueue(payload)
                    stored += 1
            assert isinstance(refused.value.__cause__, redis.exceptions.OutOfMemoryError)
            assert stored > 0 and len(q) == stored  # every job stored before is still there
    finally:
        server.close()
