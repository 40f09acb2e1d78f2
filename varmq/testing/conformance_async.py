"""Conformance part: adds for coroutines (:class:`~varmq.contract.protocols.IAsyncEnqueue`).

``enqueue_async``, ``enqueue_dedup_async`` and ``enqueue_delayed_async`` give the answers their
blocking forms give, also when many run at once (as the adds of a web service's requests do,
and as a storage that stores concurrent adds in one transaction sees them): each call is told
whether its own job was stored, a job id is stored once however many concurrent calls bring it,
a capacity is never exceeded, a closed queue refuses, and while the storage cannot answer every
call raises and nothing is stored. Run when the storage claims ``IAsyncEnqueue``
(``ASYNC_EXTENSIONS``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from varmq.contract.protocols import IAsyncEnqueue, ICapacitySetter, IDedupQueue, IDelayedEnqueue
from varmq.testing._suite import (
    DELAY,
    SuiteBase,
    drain,
    priority_arg,
    put_async,
)
from varmq.testing.harness import QueueKind, StorageHarness

__all__ = ["AsyncConformance"]

BURST = 50
"""Concurrent calls in one burst."""


async def _burst(*calls: Any) -> list[Any]:
    """Run the awaitables at once; their results (or exceptions) in order."""
    return list(await asyncio.gather(*calls, return_exceptions=True))


class AsyncConformance(SuiteBase):
    """``enqueue_async`` and its dedup and delayed forms."""

    def test_concurrent_async_adds_are_each_stored_and_told_so(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IAsyncEnqueue,))
        items = [f"job-{n}".encode() for n in range(BURST)]
        answers = asyncio.run(_burst(*(put_async(q, kind, item) for item in items)))
        assert answers == [True] * BURST
        assert sorted(drain(q)) == sorted(items)

    def test_async_adds_awaited_in_turn_keep_their_order(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IAsyncEnqueue,))

        async def in_turn() -> None:
            for item in (b"a", b"b", b"c"):
                assert await put_async(q, kind, item) is True

        asyncio.run(in_turn())
        assert drain(q) == [b"a", b"b", b"c"]

    def test_concurrent_async_adds_of_one_job_id_store_it_once(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IAsyncEnqueue, IDedupQueue))
        prio = priority_arg(kind)
        calls = [q.enqueue_dedup_async(f"copy-{n}".encode(), "same", prio) for n in range(10)]
        calls += [q.enqueue_dedup_async(b"other", "other", prio)]
        answers = asyncio.run(_burst(*calls))
        assert answers == [True] * 11  # a job id already stored is not a refusal
        taken = drain(q)
        assert len(taken) == 2 and b"other" in taken

    def test_concurrent_async_adds_never_exceed_the_capacity(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IAsyncEnqueue, ICapacitySetter))
        q.set_capacity(3)
        answers = asyncio.run(_burst(*(put_async(q, kind, b"x") for _ in range(8))))
        assert sorted(answers) == [False] * 5 + [True] * 3
        assert len(q) == 3

    def test_an_async_delayed_add_waits_its_delay(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IAsyncEnqueue, IDelayedEnqueue))
        call = q.enqueue_delayed_async(b"later", DELAY, None, priority_arg(kind))
        assert asyncio.run(_burst(call)) == [True]
        assert len(q) == 0
        harness.advance(DELAY + 0.1)
        assert drain(q) == [b"later"]

    def test_an_async_add_to_a_closed_queue_is_refused(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        q = self.open(harness, kind, needs=(IAsyncEnqueue,))
        q.close()
        assert asyncio.run(_burst(put_async(q, kind, b"x"))) == [False]

    def test_async_adds_while_the_storage_cannot_answer_raise_and_store_nothing(
        self, harness: StorageHarness, kind: QueueKind
    ) -> None:
        self.require(IAsyncEnqueue)
        outage = getattr(harness, "outage", None)
        if outage is None:
            pytest.skip("the harness cannot take the storage away (no outage)")
        q = self.open(harness, kind)
        with outage():
            answers = asyncio.run(_burst(*(put_async(q, kind, b"lost?") for _ in range(5))))
        for answer in answers:
            assert isinstance(answer, Exception), f"answered {answer!r} for a storage that was away"
            assert not isinstance(answer, TypeError | ValueError)
        assert len(q) == 0
        assert asyncio.run(put_async(q, kind, b"kept")) is True
        assert drain(q) == [b"kept"]
