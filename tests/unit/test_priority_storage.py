"""``MemoryPriorityQueue`` as storage: order, capacity, many priorities, adds and takes at once.

Adds to an existing priority and takes run without the queue's lock; the lock only guards a new
priority's line and the dropping of empty lines. The race tests below replay, step by step, an
add whose line is dropped under it, which is where a job could be lost.
"""

from __future__ import annotations

import random
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

import varmq
from varmq.sources.memory_queues import MemoryPriorityQueue

# The lines a queue keeps before it drops empty ones (varmq.sources.memory_queues._LINES_KEPT).
LINES_KEPT = 32


def drain(queue: MemoryPriorityQueue) -> list[Any]:
    taken = []
    while (item := queue.dequeue()) is not None:
        taken.append(item)
    return taken


@pytest.fixture
def fast_switching() -> Iterator[None]:
    """Threads switch every microsecond: interleavings that are rare otherwise happen."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def test_lower_numbers_first_and_first_in_first_out_among_equals() -> None:
    queue = MemoryPriorityQueue()
    items = [(f"p{p}-{i}", p) for i in range(5) for p in (3, -1, 0, 7, 3)]
    for item, priority in items:
        assert queue.enqueue(item, priority)
    expected = [item for item, _ in sorted(items, key=lambda pair: pair[1])]  # stable: FIFO
    assert len(queue) == len(items)
    assert queue.values() == expected
    assert drain(queue) == expected
    assert len(queue) == 0
    assert queue.is_empty_and_open()


def test_capacity_counts_every_priority() -> None:
    queue = MemoryPriorityQueue(3)
    assert [queue.enqueue(i, i % 2) for i in range(4)] == [True, True, True, False]
    assert queue.dequeue() == 0
    assert queue.enqueue(9, 5)
    assert not queue.enqueue(10, 0)
    assert drain(queue) == [2, 1, 9]


def test_priorities_that_keep_changing_keep_order_and_a_bounded_number_of_lines() -> None:
    # Deadlines as priorities: every job a priority of its own, taken soon after. The empty
    # lines are dropped, so the queue does not grow with the number of priorities ever used.
    queue = MemoryPriorityQueue()
    taken = []
    for deadline in range(5_000):
        assert queue.enqueue(deadline, deadline)
        if deadline >= 10:  # ten jobs wait at any time, each a priority of its own
            taken.append(queue.dequeue())
        assert len(queue._lines) <= LINES_KEPT + 1
    taken += drain(queue)
    assert taken == list(range(5_000))
    assert queue.is_empty_and_open()


def test_taking_through_many_waiting_priorities_drops_the_lines_it_emptied() -> None:
    queue = MemoryPriorityQueue()
    for priority in range(1_000):
        for copy in range(3):
            assert queue.enqueue((priority, copy), priority)
    taken = [queue.dequeue() for _ in range(1_500)]
    assert taken == [(p, c) for p in range(500) for c in range(3)]
    # 500 priorities are done: no more than LINES_KEPT empty lines are kept before the rest.
    assert len(queue._lines) <= 500 + LINES_KEPT
    assert drain(queue) == [(p, c) for p in range(500, 1_000) for c in range(3)]


def test_purge_empties_every_line_and_later_adds_work() -> None:
    queue = MemoryPriorityQueue()
    for i in range(100):
        queue.enqueue(i, i)
    queue.purge()
    assert len(queue) == 0 and queue.dequeue() is None and queue.values() == []
    assert queue.enqueue("again", 50) and queue.enqueue("first", 1)
    assert drain(queue) == ["first", "again"]


def _with_empty_lines(queue: MemoryPriorityQueue, count: int) -> None:
    """Leave ``count`` empty lines (priorities 0 to count - 1) and "keep" at priority count."""
    for priority in range(count):
        queue.enqueue(priority, priority)
    queue.enqueue("keep", count)
    assert [queue.dequeue() for _ in range(count)] == list(range(count))
    assert len(queue._lines) == count + 1  # no take found the queue empty: nothing dropped


def test_an_add_whose_line_is_dropped_after_it_looked_the_line_up_loses_nothing() -> None:
    queue = MemoryPriorityQueue()
    _with_empty_lines(queue, LINES_KEPT)

    class DropsLinesAfterTheLookUp(dict[int, Any]):
        armed = True

        def get(self, key: int, default: Any = None) -> Any:
            line = super().get(key, default)
            if self.armed and key == 5:
                # Another thread's add of a new priority drops the empty lines right after
                # this add found line 5, before it appends to it.
                self.armed = False
                with queue._lock:
                    queue._drop_empty_locked()
            return line

    queue._by_priority = DropsLinesAfterTheLookUp(queue._by_priority)
    assert queue.enqueue("late", 5)
    assert not queue._by_priority.armed  # the drop ran between the look-up and the append
    assert queue.values() == ["late", "keep"]
    assert drain(queue) == ["late", "keep"]


def test_an_add_that_appended_before_its_line_was_dropped_loses_nothing() -> None:
    queue = MemoryPriorityQueue()
    _with_empty_lines(queue, LINES_KEPT)

    class AppendsBeforeTheDelete(dict[int, Any]):
        def __delitem__(self, key: int) -> None:
            if key == 5:
                # An add found line 5 while it was empty, appended and checked that the line
                # was still its priority's, all after the drop chose to drop it.
                self[5].append("late")
            super().__delitem__(key)

    queue._by_priority = AppendsBeforeTheDelete(queue._by_priority)
    assert queue.enqueue("new", 1000)  # a new line: the empty ones are dropped first
    assert len(queue._lines) == 3  # the empty lines were dropped: 5 again, "keep" and 1000
    assert drain(queue) == ["late", "keep", "new"]


def test_threads_adding_and_taking_at_once_take_every_item_exactly_once(
    fast_switching: None,
) -> None:
    queue = MemoryPriorityQueue()
    producers, per_producer = 4, 3_000
    taken: list[list[Any]] = [[] for _ in range(3)]
    done = threading.Event()

    def produce(index: int) -> None:
        rng = random.Random(index)
        for i in range(per_producer):
            # Mostly a few common priorities, now and then a new one (a line made, and
            # empty ones dropped, while other threads add and take).
            priority = rng.randrange(4) if rng.random() < 0.9 else 100 + rng.randrange(10**6)
            assert queue.enqueue((index, i), priority)

    def consume(out: list[Any]) -> None:
        while True:
            item = queue.dequeue()
            if item is not None:
                out.append(item)
            elif done.is_set() and len(queue) == 0:
                return

    consumers = [threading.Thread(target=consume, args=(out,)) for out in taken]
    adders = [threading.Thread(target=produce, args=(i,)) for i in range(producers)]
    for thread in consumers + adders:
        thread.start()
    for thread in adders:
        thread.join()
    done.set()
    for thread in consumers:
        thread.join(30)
        assert not thread.is_alive()
    everything = [item for out in taken for item in out]
    assert len(everything) == producers * per_producer  # no item twice
    assert set(everything) == {(p, i) for p in range(producers) for i in range(per_producer)}


def test_a_worker_runs_every_job_of_a_priority_queue_fed_by_many_threads(
    fast_switching: None,
) -> None:
    ran: list[int] = []
    lock = threading.Lock()

    def record(job: varmq.Job[int]) -> None:
        with lock:
            ran.append(job.data)

    worker = varmq.new_worker(record, 3)
    try:
        queue = worker.bind_priority_queue()

        def produce(start: int) -> None:
            for i in range(start, start + 1_000):
                assert queue.add(i, i % 50)  # more priorities than lines kept: lines come and go

        threads = [threading.Thread(target=produce, args=(k * 1_000,)) for k in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert worker.wait(30)
    finally:
        worker.stop()
    assert sorted(ran) == list(range(4_000))
