"""Producers' adds on Redis: the group commit of redisq._adds and the asyncio transport
(redisq._aio). The group commit itself is tested in tests/unit/test_group_commit.py.

Every caller must be told what happened to its own job, whether it wrote alone, led a batch or
rode along in one: stored, already stored, refused, or the exception of its batch's call.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from typing import Any

import pytest
from redis.cluster import RedisCluster

import redisq
import varmq
from redisq._adds import Triple
from tests.adapters.conftest import Backend
from tests.support.redis_server import RedisClusterNodes

THREADS = 8
WAIT = 10.0


# -- on Redis ----------------------------------------------------------------------------------


def _together(n: int, call: Callable[[int], Any]) -> list[Any]:
    """``call(i)`` for i in range(n), from n threads started together; each one's outcome."""
    barrier = threading.Barrier(n)
    outcomes: list[Any] = [None] * n

    def run(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = call(i)
        except Exception as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    return outcomes


def test_concurrent_adds_are_all_stored_once(backend: Backend) -> None:
    q = backend.queues().new_distributed_queue("group")
    per_thread = 100
    outcomes = _together(
        THREADS, lambda t: [q.enqueue(b"%d-%d" % (t, i)) for i in range(per_thread)]
    )
    assert outcomes == [[True] * per_thread] * THREADS
    stored = q.values()
    assert sorted(stored) == sorted(b"%d-%d" % (t, i) for t in range(THREADS) for i in range(100))
    for t in range(THREADS):  # each thread's jobs in the order it added them
        mine = [item for item in stored if item.startswith(b"%d-" % t)]
        assert mine == [b"%d-%d" % (t, i) for i in range(per_thread)]


def test_a_dedup_hit_among_concurrent_adds_stores_the_job_once(backend: Backend) -> None:
    q = backend.queues().new_distributed_queue("dedup")
    outcomes = _together(THREADS, lambda t: q.enqueue_dedup(b"job-%d" % t, "same-id"))
    assert outcomes == [True] * THREADS  # stored, or already stored: both True
    assert len(q.values()) == 1
    assert q.enqueue_dedup(b"again", "same-id") is True and len(q.values()) == 1


def test_capacity_under_concurrent_adds_refuses_exactly_the_excess(backend: Backend) -> None:
    q = backend.queues().new_priority_queue("capacity")
    q.set_capacity(5)
    outcomes = _together(THREADS * 2, lambda t: q.enqueue(b"%d" % t, t % 3))
    assert outcomes.count(True) == 5 and outcomes.count(False) == THREADS * 2 - 5
    assert len(q.values()) == 5


def test_strict_adds_through_a_handle_raise_for_refused_jobs_only(backend: Backend) -> None:
    q = backend.queues().new_distributed_queue("strict")
    q.set_capacity(3)
    handle = varmq.new_distributed_queue(q)
    outcomes = _together(THREADS, lambda t: handle.add(t, strict=True))
    assert outcomes.count(True) == 3
    refused = [o for o in outcomes if o is not True]
    assert len(refused) == THREADS - 3
    assert all(isinstance(o, varmq.EnqueueError) for o in refused), refused


def test_every_concurrent_caller_hears_the_outage(stoppable_backend: Backend) -> None:
    q = stoppable_backend.queues().new_distributed_queue("down")
    assert q.enqueue(b"before")
    stoppable_backend.stop()
    try:
        outcomes = _together(THREADS, lambda t: q.enqueue(b"%d" % t))
    finally:
        stoppable_backend.start()
    assert all(isinstance(o, redisq.RedisUnavailableError) for o in outcomes), outcomes
    assert q.enqueue(b"after")


def test_adds_to_a_queue_now_of_the_other_kind_are_refused(backend: Backend) -> None:
    queues = backend.queues()
    q = queues.new_queue("kind")
    queues._client.hset(q._keys.meta, "kind", "priority")  # someone made it a priority queue
    assert _together(4, lambda t: q.enqueue(b"%d" % t)) == [False] * 4
    assert asyncio.run(_one(q, b"async")) is False
    assert q.values() == []


# -- asyncio -----------------------------------------------------------------------------------


def test_async_adds_in_flight_together_are_stored_in_order_with_their_own_answers(
    backend: Backend,
) -> None:
    q = backend.queues().new_distributed_queue("async")
    q.set_capacity(150)

    async def burst() -> list[bool]:
        return await asyncio.gather(*(q.enqueue_async(b"%d" % i) for i in range(200)))

    assert asyncio.run(burst()) == [True] * 150 + [False] * 50
    stored = q.values()
    assert sorted(stored) == sorted(b"%d" % i for i in range(150))
    if backend.name == "redis":  # one connection, calls in order: the adds' own order
        assert stored == [b"%d" % i for i in range(150)]


def test_async_dedup_delay_and_priority(backend: Backend) -> None:
    queues = backend.queues()
    q = queues.new_distributed_priority_queue("async-kinds")

    async def adds() -> list[bool]:
        same = [q.enqueue_dedup_async(b"d%d" % i, "one-id", 1) for i in range(5)]
        return await asyncio.gather(
            q.enqueue_async(b"low", 9),
            q.enqueue_async(b"high", -1),
            q.enqueue_delayed_async(b"later", 60.0),
            *same,
        )

    assert asyncio.run(adds()) == [True] * 8
    assert q.values() == [b"high", b"d0", b"low"]
    assert q.stats()["delayed"] == 1


# Real Redis only: fakeredis has no redis.asyncio twin, so its async adds run on a thread.
@pytest.mark.parametrize("backend", ["redis"], indirect=True)
def test_async_adds_use_redis_asyncio_not_the_blocking_path(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    q = backend.queues().new_distributed_queue("native")

    def blocking(_triples: list[Triple]) -> list[int]:
        raise AssertionError("the blocking add was used")

    monkeypatch.setattr(q._async_adds, "_send_blocking", blocking)

    async def burst() -> list[bool]:
        return await asyncio.gather(*(q.enqueue_async(b"%d" % i) for i in range(50)))

    assert asyncio.run(burst()) == [True] * 50


def test_a_cancelled_async_add_leaves_the_others_answered(backend: Backend) -> None:
    q = backend.queues().new_distributed_queue("cancel")

    async def burst() -> list[Any]:
        tasks = [asyncio.ensure_future(q.enqueue_async(b"%d" % i)) for i in range(20)]
        await asyncio.sleep(0)
        tasks[5].cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    outcomes = asyncio.run(burst())
    assert all(o is True for i, o in enumerate(outcomes) if i != 5)
    assert asyncio.run(_one(q, b"next")) is True


async def _one(q: Any, item: bytes) -> bool:
    return bool(await q.enqueue_async(item))


def test_async_adds_in_flight_all_raise_while_redis_is_down(stoppable_backend: Backend) -> None:
    q = stoppable_backend.queues().new_distributed_queue("async-down")
    assert asyncio.run(_one(q, b"before"))
    stoppable_backend.stop()

    async def burst() -> list[Any]:
        adds = (q.enqueue_async(b"%d" % i) for i in range(20))
        return await asyncio.gather(*adds, return_exceptions=True)

    try:
        outcomes = asyncio.run(burst())
    finally:
        stoppable_backend.start()
    assert all(isinstance(o, redisq.RedisUnavailableError) for o in outcomes), outcomes
    assert asyncio.run(_one(q, b"after"))


def test_async_adds_after_close_are_refused(backend: Backend) -> None:
    queues = backend.queues()
    q = queues.new_queue("closed")
    assert asyncio.run(_one(q, b"open"))
    queues.close()
    assert asyncio.run(_one(q, b"closed")) is False


def test_on_a_cluster_adds_batch_through_the_cluster_client_and_async_adds_use_a_thread(
    redis_cluster: RedisClusterNodes,
) -> None:
    client = RedisCluster(host="127.0.0.1", port=redis_cluster.ports[0])
    queues = redisq.new(client)
    try:
        q = queues.new_distributed_queue(f"cluster-adds-{id(client)}")
        q.purge()
        outcomes = _together(THREADS, lambda t: [q.enqueue(b"%d-%d" % (t, i)) for i in range(20)])
        assert outcomes == [[True] * 20] * THREADS
        assert q.enqueue_dedup(b"d", "one") and q.enqueue_dedup(b"d", "one")

        async def burst() -> list[bool]:
            return await asyncio.gather(*(q.enqueue_async(b"a%d" % i) for i in range(30)))

        assert asyncio.run(burst()) == [True] * 30
        assert len(q) == THREADS * 20 + 1 + 30
    finally:
        queues.close()
        client.close()


def test_adds_load_the_script_again_after_redis_forgot_it(backend: Backend) -> None:
    queues = backend.queues()
    q = queues.new_distributed_queue("flushed")
    assert q.enqueue(b"before") and asyncio.run(_one(q, b"before, async"))
    queues._client.script_flush()  # as after a restart without persistence
    assert q.enqueue(b"after")
    queues._client.script_flush()
    assert asyncio.run(_one(q, b"after, async"))
    assert q.values() == [b"before", b"before, async", b"after", b"after, async"]


# -- wake-ups: a worker never sleeps on jobs it was not told about -----------------------------


def test_workers_that_never_poll_pick_up_every_burst_busy_or_idle(backend: Backend) -> None:
    # poll_interval far beyond the test: only "enqueued" messages can make the worker look,
    # and adds publish only when a take found the queue empty since the last one.
    ran: list[int] = []
    changed = threading.Condition()
    gate = threading.Event()

    def job(j: varmq.Job[int]) -> None:
        assert gate.wait(WAIT)
        with changed:
            ran.append(j.data)
            changed.notify_all()

    def ran_count(n: int) -> bool:
        with changed:
            return changed.wait_for(lambda: len(ran) >= n, WAIT)

    # Two consumers, as two processes would be (each its own Queues: its own connections).
    workers = [varmq.new_worker(job, 2, poll_interval=600.0, prefetch=0) for _ in range(2)]
    for worker in workers:
        worker.with_distributed_queue(backend.queues().new_distributed_queue("wake"))
    producer = varmq.new_distributed_queue(backend.queues().new_distributed_queue("wake"))
    try:
        gate.set()
        assert producer.add(0)  # idle worker: rung
        assert ran_count(1)
        gate.clear()  # the next jobs hold every slot, and more arrive while they do
        for n in range(1, 11):
            assert producer.add(n)
        gate.set()
        assert ran_count(11), f"ran {sorted(ran)}"
        for n in range(11, 14):  # idle again: the next add rings again
            assert producer.add(n)
            assert ran_count(n + 1), f"ran {sorted(ran)}"
    finally:
        gate.set()
        for worker in workers:
            worker.stop()
    assert sorted(ran) == list(range(14))
