"""redisq's own claims, each run on a real redis-server and on fakeredis (``backend`` fixture).

The storage contract common to every adapter is checked by the conformance suite
(``test_redisq_conformance.py``); outages and restarts by ``test_redisq_outages.py``. Lease expiry
here uses the Redis server's clock and short real sleeps, on purpose: it is the production path.
"""

from __future__ import annotations

import logging
import random
import socket
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING

import fakeredis
import pytest
import redis
from redis.crc import key_slot

import redisq
from redisq._keys import REGISTRY, queue_keys
from redisq._location import redact
from tests.support.redis_server import RedisServer

if TYPE_CHECKING:
    from tests.adapters.conftest import Backend, MsClock

LEASE = 0.3  # seconds; real time passes in the tests that use it


def _raw(backend: Backend, queues: redisq.Queues) -> redis.Redis:
    """The client under ``queues``, to look at keys directly."""
    return queues._client  # type: ignore[return-value]


def test_fifo_queue_hands_jobs_out_in_enqueue_order(backend: Backend) -> None:
    q = backend.queues().new_queue("fifo")
    items = [f"job-{i}".encode() for i in range(20)]
    assert all(q.enqueue(item) for item in items)
    assert [q.dequeue() for _ in items] == items
    assert q.dequeue() is None


def test_priority_queue_takes_lower_numbers_first_and_fifo_among_equals(backend: Backend) -> None:
    q = backend.queues().new_priority_queue("prio")
    jobs = [(3, b"c1"), (-7, b"neg1"), (0, b"z1"), (3, b"c2"), (-7, b"neg2"), (2**40, b"huge")]
    jobs += [(0, b"z2"), (-(2**40), b"tiny")]
    assert all(q.enqueue(item, priority) for priority, item in jobs)
    expected = [b"tiny", b"neg1", b"neg2", b"z1", b"z2", b"c1", b"c2", b"huge"]
    assert q.values() == expected
    assert [q.dequeue() for _ in jobs] == expected


def test_identical_payloads_are_distinct_jobs(backend: Backend) -> None:
    q = backend.queues().new_priority_queue("same")
    assert q.enqueue(b"x", 1) and q.enqueue(b"x", 1)
    assert len(q) == 2
    batch = q.dequeue_batch_with_ack_ids(5)
    assert [item for item, _ in batch] == [b"x", b"x"]
    assert q.acknowledge_many([ack for _, ack in batch]) == [True, True]


def test_enqueue_many_stores_every_item_in_order_across_script_calls(backend: Backend) -> None:
    queues = backend.queues()
    q = queues.new_distributed_queue("many")
    items = [f"job-{i}".encode() for i in range(2500)]  # three script calls
    assert q.enqueue_many(items) == 2500
    assert q.values() == items
    pq = queues.new_priority_queue("many-prio")
    assert pq.enqueue(b"late", 9)
    assert pq.enqueue_many([b"a", "b"], 1) == 2
    assert pq.values() == [b"a", b"b", b"late"]
    with pytest.raises(TypeError, match=r"'many-prio'.*expected bytes or str"):
        pq.enqueue_many([b"c", 3], 1)  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"'many-prio'.*priority=9007199254740993"):
        pq.enqueue_many([b"c"], 2**53 + 1)
    assert len(pq) == 3


def test_enqueue_many_stops_at_the_capacity(backend: Backend) -> None:
    q = backend.queues().new_queue("many-capped")
    q.set_capacity(3)
    assert q.enqueue(b"first")
    assert q.enqueue_many([b"a", b"b", b"c"]) == 2
    assert q.values() == [b"first", b"a", b"b"]


def test_str_is_stored_as_utf8_and_other_types_are_refused(backend: Backend) -> None:
    q = backend.queues().new_queue("types")
    assert q.enqueue("grüße") and q.enqueue(bytearray(b"ba"))
    for bad in (42, None, 1.5):
        with pytest.raises(TypeError, match=r"'types'.*expected bytes or str"):
            q.enqueue(bad)
    assert q.dequeue() == "grüße".encode() and q.dequeue() == b"ba" and q.dequeue() is None


def test_acknowledge_removes_every_trace_of_the_job(backend: Backend) -> None:
    queues = backend.queues()
    q = queues.new_priority_queue("ack")
    assert q.enqueue_dedup(b"a", "job-a", 4)
    taken = q.dequeue_with_ack_id()
    assert taken is not None and taken[0] == b"a"
    assert q.acknowledge(taken[1]) is True
    keys = queue_keys("ack")
    left = {key.decode() for key in _raw(backend, queues).keys("*")}
    assert left == {keys.meta, keys.seq, REGISTRY}  # kind, sequence counter, queue registry
    assert q.dequeue_with_ack_id() is None


def test_unknown_or_repeated_ack_id_returns_false(backend: Backend) -> None:
    q = backend.queues().new_queue("unknown-ack")
    assert q.enqueue(b"a")
    assert q.acknowledge("nope") is False and q.extend_lease("nope") is False
    assert q.acknowledge(123) is False  # type: ignore[arg-type]
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    assert q.acknowledge(taken[1]) is True
    assert q.acknowledge(taken[1]) is False


@pytest.mark.parametrize("distributed", [False, True], ids=["plain", "distributed"])
def test_expired_lease_returns_the_job_with_its_priority_a_new_ack_id_and_attempt_two(
    backend: Backend, distributed: bool
) -> None:
    queues = backend.queues()
    opener = queues.new_distributed_priority_queue if distributed else queues.new_priority_queue
    q = opener("expiry", visibility_timeout=LEASE)
    assert q.enqueue(b"first", 5) and q.enqueue(b"second", 5)
    [(item, stale, attempts)] = q.dequeue_batch_with_attempts(1)
    assert (item, attempts) == (b"first", 1)
    assert q.enqueue(b"later", 5) and q.enqueue(b"urgent", -1)
    time.sleep(LEASE + 0.1)  # let the lease expire on the Redis server's clock
    assert q.values() == [b"urgent", b"first", b"second", b"later"]
    taken = q.dequeue_batch_with_attempts(2)
    assert [(item, attempts) for item, _, attempts in taken] == [(b"urgent", 1), (b"first", 2)]
    fresh = taken[1][1]
    assert fresh != stale
    assert q.acknowledge(stale) is False and q.extend_lease(stale) is False
    assert q.acknowledge(fresh) is True


def test_extend_lease_keeps_a_job_past_its_original_deadline(backend: Backend) -> None:
    q = backend.queues().new_queue("extend", visibility_timeout=0.4)
    assert q.enqueue(b"a")
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    time.sleep(0.25)
    assert q.extend_lease(taken[1]) is True
    time.sleep(0.25)  # past the first deadline, within the extended one
    assert len(q) == 0 and q.dequeue_with_ack_id() is None
    assert q.acknowledge(taken[1]) is True


def test_acknowledged_job_is_never_delivered_again(backend: Backend, clock: MsClock) -> None:
    q = backend.queues(clock).new_queue("acked", visibility_timeout=1)
    assert q.enqueue(b"a")
    taken = q.dequeue_with_ack_id()
    assert taken is not None and q.acknowledge(taken[1])
    clock.advance(3600)
    assert len(q) == 0 and q.values() == [] and q.dequeue_with_ack_id() is None


def test_many_expired_leases_all_come_back_across_takes(backend: Backend, clock: MsClock) -> None:
    q = backend.queues(clock).new_queue("many-expired", visibility_timeout=1)
    items = [f"job-{i:03}".encode() for i in range(250)]
    assert all(q.enqueue(item) for item in items)
    assert len(q.dequeue_batch_with_ack_ids(250)) == 250
    clock.advance(2)
    assert len(q) == 250
    again = [job for _ in range(10) for job in q.dequeue_batch_with_attempts(40)]
    assert sorted(item for item, _, _ in again) == items
    assert {attempts for _, _, attempts in again} == {2}


def test_a_take_run_twice_with_one_prefix_strands_no_job(
    backend: Backend, clock: MsClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a client retry does after a reply lost to a dropped connection: the same script
    # call, same prefix, runs a second time. The first run's jobs must come back, not vanish.
    q = backend.queues(clock).new_queue("retried-take", visibility_timeout=1)
    items = [f"job-{i}".encode() for i in range(4)]
    assert all(q.enqueue(item) for item in items)
    monkeypatch.setattr("redisq._queue.secrets.token_hex", lambda n: "same-prefix")
    first = q.dequeue_batch_with_ack_ids(2)  # the run whose reply the client never saw
    second = q.dequeue_batch_with_ack_ids(2)
    assert {ack for _, ack in first}.isdisjoint(ack for _, ack in second)
    assert all(q.acknowledge(ack) for _, ack in second)
    clock.advance(2)  # the first run's leases run out: its jobs are waiting again
    assert sorted(item for item, _ in q.dequeue_batch_with_ack_ids(10)) == items[:2]


def test_batch_take_returns_at_most_n_jobs_with_distinct_ack_ids(backend: Backend) -> None:
    q = backend.queues().new_queue("batch")
    assert all(q.enqueue(f"{i}") for i in range(7))
    first = q.dequeue_batch_with_ack_ids(5)
    second = q.dequeue_batch_with_ack_ids(5)
    assert [len(first), len(second)] == [5, 2]
    assert len({ack for _, ack in first + second}) == 7
    assert q.dequeue_batch_with_ack_ids(0) == [] and q.dequeue_batch_with_ack_ids(3) == []
    assert q.acknowledge_many([ack for _, ack in first + second]) == [True] * 7


def test_dedup_stores_a_job_id_once_until_it_is_acknowledged(backend: Backend) -> None:
    q = backend.queues().new_priority_queue("dedup")
    assert q.enqueue_dedup(b"one", "job-1", 3) and q.enqueue_dedup(b"dup", "job-1", 0)
    assert q.enqueue_dedup(b"two", "job-2", 1)
    assert q.values() == [b"two", b"one"]
    taken = q.dequeue_batch_with_ack_ids(2)
    assert q.enqueue_dedup(b"dup", "job-1", 0) is True and len(q) == 0  # in flight: still there
    assert q.acknowledge_many([ack for _, ack in taken]) == [True, True]
    assert q.enqueue_dedup(b"again", "job-1") is True
    assert q.values() == [b"again"]


def test_dedup_on_a_fifo_queue_ignores_priority(backend: Backend) -> None:
    q = backend.queues().new_queue("dedup-fifo")
    assert q.enqueue_dedup(b"a", "x", 9) and q.enqueue_dedup(b"b", "y", -9)
    assert q.values() == [b"a", b"b"]


def test_len_and_values_count_expired_leases_as_waiting(backend: Backend, clock: MsClock) -> None:
    q = backend.queues(clock).new_priority_queue("len", visibility_timeout=1)
    assert q.enqueue(b"b", 2) and q.enqueue(b"a", 1) and q.enqueue(b"c", 3)
    assert q.dequeue_with_ack_id() is not None
    assert len(q) == 2 and q.values() == [b"b", b"c"]
    clock.advance(1)
    assert len(q) == 3 and q.values() == [b"a", b"b", b"c"]


def test_purge_removes_waiting_jobs_and_keeps_jobs_in_flight(backend: Backend) -> None:
    queues = backend.queues()
    q = queues.new_queue("purge")
    assert all(q.enqueue_dedup(f"{i}", f"job-{i}") for i in range(5))
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    q.purge()
    assert len(q) == 0 and q.values() == [] and q.dequeue() is None
    assert q.enqueue_dedup(b"new", "job-3")  # the purged job's id is free again
    assert q.acknowledge(taken[1]) is True
    assert q.values() == [b"new"]


def test_closed_queue_refuses_work_but_finishes_jobs_taken_before(backend: Backend) -> None:
    queues = backend.queues()
    q = queues.new_queue("closing")
    assert q.enqueue(b"a") and q.enqueue(b"b") and q.enqueue(b"c")
    first, second = q.dequeue_with_ack_id(), q.dequeue_with_ack_id()
    assert first is not None and second is not None
    q.close()
    assert q.enqueue(b"late") is False and q.enqueue_dedup(b"late", "j") is False
    assert q.dequeue() is None and q.dequeue_with_ack_id() is None
    assert q.dequeue_batch_with_attempts(3) == [] and len(q) == 0 and q.values() == []
    q.purge()  # a no-op once closed
    assert q.extend_lease(first[1]) is True
    assert q.acknowledge_many([first[1], second[1]]) == [True, True]
    assert queues.new_queue("closing").values() == [b"c"]


def test_queues_close_stops_every_queue_it_opened(backend: Backend) -> None:
    queues = backend.queues()
    q = queues.new_queue("owner-closed")
    assert q.enqueue(b"a")
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    queues.close()
    queues.close()  # twice is fine
    assert q.enqueue(b"b") is False and q.acknowledge(taken[1]) is False
    with pytest.raises(RuntimeError, match="owner-closed"):
        queues.new_queue("owner-closed")


def test_queues_close_leaves_a_client_passed_in_open() -> None:
    client = fakeredis.FakeRedis()
    redisq.new(client).close()
    assert client.ping() is True


def test_opening_a_queue_as_the_other_kind_raises_an_error_naming_it(backend: Backend) -> None:
    queues = backend.queues()
    assert queues.new_priority_queue("kind").enqueue(b"a", 1)
    with pytest.raises(redisq.QueueKindError, match=r"'kind' exists as a priority queue"):
        queues.new_queue("kind")
    with pytest.raises(redisq.QueueKindError, match=r"'kind' exists as a priority queue"):
        queues.new_distributed_queue("kind")
    queues.new_distributed_queue("fifo-kind")
    with pytest.raises(redisq.QueueKindError, match=r"fifo queue.*new_queue\(\)"):
        queues.new_priority_queue("fifo-kind")
    assert queues.new_distributed_priority_queue("kind").values() == [b"a"]


@pytest.mark.parametrize("name", ["a{b}c", "{", "}", "{}", "}{", "a b", "grüße ✓", "%7B", "{x}y"])
def test_queue_names_with_any_characters_keep_all_keys_in_one_slot(
    backend: Backend, name: str
) -> None:
    queues = backend.queues()
    q = queues.new_queue(name)
    assert q.enqueue(name) and q.values() == [name.encode()]
    keys = queue_keys(name)
    assert len({key_slot(key.encode()) for key in keys.keys}) == 1
    stored = [key for key in _raw(backend, queues).keys("*") if key != REGISTRY.encode()]
    assert stored and all(key_slot(key) == key_slot(keys.meta.encode()) for key in stored)
    others = ["a{b}c", "{", "}", "{}", "}{", "a b", "grüße ✓", "%7B", "{x}y"]
    assert all(queues.new_queue(other).values() == [] for other in others if other != name)


def test_an_empty_queue_name_is_refused(backend: Backend) -> None:
    with pytest.raises(ValueError, match="queue name ''; expected a str of 1 to 200 bytes"):
        backend.queues().new_queue("")


def test_eight_threads_taking_concurrently_get_every_job_exactly_once(backend: Backend) -> None:
    queues = backend.queues()
    producer = queues.new_priority_queue("race")
    items = [f"job-{i}".encode() for i in range(2000)]
    assert all(producer.enqueue(item, i % 5) for i, item in enumerate(items))
    taken: Counter[bytes] = Counter()
    lock = threading.Lock()
    start = threading.Barrier(8)

    def consume(seed: int) -> None:
        q = backend.queues().new_priority_queue("race")  # own connection, like a process
        rng = random.Random(seed)
        start.wait(timeout=10)
        while batch := q.dequeue_batch_with_ack_ids(rng.randint(1, 16)):
            assert all(q.acknowledge_many([ack for _, ack in batch]))
            with lock:
                taken.update(item for item, _ in batch)

    threads = [threading.Thread(target=consume, args=(i,), name=f"race-{i}") for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert sorted(taken) == sorted(items) and set(taken.values()) == {1}
    assert len(producer) == 0


def test_set_capacity_refuses_enqueues_beyond_it(backend: Backend) -> None:
    q = backend.queues().new_queue("capacity")
    q.set_capacity(1)
    assert q.enqueue(b"a") and q.enqueue(b"b") is False
    assert q.enqueue_dedup(b"a2", "j") is False
    with pytest.raises(ValueError, match="capacity"):
        q.set_capacity(-1)


def test_script_is_loaded_again_after_redis_forgot_it(backend: Backend) -> None:
    queues = backend.queues()
    q = queues.new_queue("noscript")
    assert q.enqueue(b"a")
    _raw(backend, queues).script_flush()
    assert q.enqueue(b"b") and q.values() == [b"a", b"b"]


def test_a_client_that_decodes_responses_is_refused() -> None:
    with pytest.raises(ValueError, match="decode_responses=False"):
        redisq.new(fakeredis.FakeRedis(decode_responses=True))


def test_an_unsupported_url_is_refused_without_showing_the_password() -> None:
    with pytest.raises(ValueError, match="redis://") as error:
        redisq.new("http://user:secret@example.com:1234/0")
    assert "secret" not in str(error.value)


# --- naming the server, and opening by URL for operator tools ----------------------------------


def _unused_port() -> int:
    """A loopback port nothing listens on (never 6379)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if port != 6379:
            return port


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://h:6379/0", "redis://h:6379/0"),
        ("redis://user:secret@h:6379/0", "redis://user:***@h:6379/0"),
        ("rediss://:secret@h/1", "rediss://:***@h/1"),
        ("redis://u:p@[::1]:7000/2", "redis://u:***@[::1]:7000/2"),
        ("redis://h/0?password=secret&db=3", "redis://h/0?password=***&db=3"),
        ("redis://h/0?ssl_password=secret", "redis://h/0?ssl_password=***"),
        ("unix://:secret@/run/redis.sock?db=0", "unix://:***@/run/redis.sock?db=0"),
        ("unix:///run/redis.sock?Password=secret", "unix:///run/redis.sock?Password=***"),
        ("redis://user:secret@h:port/0", "redis://***"),  # unparsable: hidden whole
    ],
)
def test_redact_hides_passwords_in_the_user_info_and_the_query(url: str, shown: str) -> None:
    assert redact(url) == shown


def test_location_and_repr_name_the_url_without_its_passwords() -> None:
    queues = redisq.new("redis://user:secret@127.0.0.1:1/0?password=other")
    try:
        assert queues.location == "redis://user:***@127.0.0.1:1/0?password=***"
        assert repr(queues) == f"<redisq.Queues {queues.location}>"
    finally:
        queues.close()
    client = fakeredis.FakeRedis(host="cache.internal", port=6380, db=2, password="secret")
    assert redisq.new(client).location == "redis://cache.internal:6380/2"


def test_warnings_and_errors_name_redis_without_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    queues = redisq.new(f"redis://:secret@127.0.0.1:{_unused_port()}/0")
    try:
        with (
            caplog.at_level("WARNING", logger="redisq"),
            pytest.raises(redisq.RedisUnavailableError) as unreachable,
        ):
            queues.new_queue("q")
        assert isinstance(unreachable.value.__cause__, redis.ConnectionError)
        with pytest.raises(ValueError) as caught:
            queues.new_queue("q", visibility_timeout=-1)
    finally:
        queues.close()
    said = [record.getMessage() for record in caplog.records]
    said += [str(unreachable.value), str(caught.value)]
    assert all(queues.location in line and "secret" not in line for line in said), said


def test_open_url_checks_at_once_that_redis_answers(redis_url: str) -> None:
    assert redisq.URL_SCHEMES == ("redis", "rediss", "unix")
    with redisq.open_url(redis_url) as queues:
        assert queues.location == redis_url
        name = f"open-url-{random.getrandbits(64):x}"
        assert queues.new_queue(name).enqueue(b"a")
        assert (name, "fifo") in queues.list_queues()


def test_open_url_of_an_unreachable_redis_raises_naming_it_without_the_password() -> None:
    port = _unused_port()
    for url, shown in [
        (f"redis://:secret@127.0.0.1:{port}/0", f"redis://:***@127.0.0.1:{port}/0"),
        ("unix:///nonexistent/redis.sock?password=secret", "password=***"),
    ]:
        with pytest.raises(redisq.RedisUnavailableError, match="is unreachable") as caught:
            redisq.open_url(url)
        assert isinstance(caught.value, ConnectionError)
        assert shown in str(caught.value) and "secret" not in str(caught.value)


def test_open_url_raises_when_redis_refuses_the_credentials(redis_url: str) -> None:
    url = redis_url.replace("redis://", "redis://nobody:secret@", 1)
    with pytest.raises(redisq.RedisUnavailableError, match="refused the credentials") as caught:
        redisq.open_url(url)
    assert "nobody:***@" in str(caught.value) and "secret" not in str(caught.value)


def test_open_url_refuses_a_url_that_is_not_a_redis_url() -> None:
    with pytest.raises(ValueError, match="redis://, rediss:// or unix://"):
        redisq.open_url("sqlite:///jobs.db")


# -- the eviction policy ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def evicting_server() -> Iterator[RedisServer]:
    """A redis-server that may evict keys: ``--maxmemory-policy allkeys-lru``."""
    server = RedisServer(extra_args=("--maxmemory-policy", "allkeys-lru"))
    server.start()
    try:
        yield server
    finally:
        server.close()


def test_a_redis_that_may_evict_keys_is_refused_naming_the_policy_and_the_fix(
    evicting_server: RedisServer,
) -> None:
    queues = redisq.new(evicting_server.url)
    try:
        with pytest.raises(redisq.EvictionPolicyError) as refused:
            queues.new_distributed_queue("jobs")
        message = str(refused.value)
        assert "allkeys-lru" in message and queues.location in message
        assert "CONFIG SET maxmemory-policy noeviction" in message
        assert "check_eviction=False" in message
        with pytest.raises(redisq.EvictionPolicyError, match="allkeys-lru"):
            redisq.open_url(evicting_server.url)
    finally:
        queues.close()
    # Nothing was stored: the queue was refused before its kind was recorded.
    admin = redis.Redis.from_url(evicting_server.url)
    try:
        assert admin.dbsize() == 0
    finally:
        admin.close()


def test_check_eviction_false_opens_queues_on_such_a_redis_and_warns(
    evicting_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="redisq"):
        queues = redisq.new(evicting_server.url, check_eviction=False)
    try:
        q = queues.new_queue("accepted-risk")
        assert q.enqueue(b"job") and q.dequeue() == b"job"
    finally:
        queues.close()
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert any("check_eviction=False" in r.getMessage() for r in warnings)
    with redisq.open_url(evicting_server.url, check_eviction=False) as checked:
        assert checked.list_queues() == [("accepted-risk", "fifo")]


def test_a_redis_that_refuses_config_get_is_refused_naming_the_opt_out() -> None:
    queues = redisq.new(fakeredis.FakeRedis())  # fakeredis knows no CONFIG, like some clouds
    try:
        with pytest.raises(redisq.EvictionPolicyError) as refused:
            queues.new_queue("jobs")
    finally:
        queues.close()
    message = str(refused.value)
    assert "refused CONFIG GET maxmemory-policy" in message
    assert "check_eviction=False" in message


def test_the_session_redis_with_noeviction_is_accepted(redis_url: str) -> None:
    with redisq.open_url(redis_url) as queues:
        assert queues.new_queue("noeviction-ok").enqueue(b"x")
