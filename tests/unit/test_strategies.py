"""Choosing among several bound queues: PRIORITY, ROUND_ROBIN, MAX_LEN and MIN_LEN.

Each test binds queues on a worker with concurrency 1 that is not started, adds the jobs, then
starts it and records the order in which the jobs ran.
"""

from __future__ import annotations

from typing import Any

import pytest

import varmq
from varmq import Strategy

WAIT = 10.0


def run_in_order(recorder: Any, strategy: Strategy | None, fill: Any) -> list[Any]:
    options = {} if strategy is None else {"strategy": strategy}
    worker = varmq.new_worker(recorder.fn, 1, auto_run=False, **options)
    fill(worker)
    worker.start()
    assert worker.wait(WAIT)
    return recorder.ran


def three_queues(sizes: dict[str, int]) -> Any:
    def fill(worker: Any) -> None:
        for name, size in sizes.items():
            queue = worker.bind_queue()
            for i in range(size):
                queue.add(f"{name}{i}")

    return fill


def test_strategy_names() -> None:
    assert {s.name for s in Strategy} == {"PRIORITY", "ROUND_ROBIN", "MAX_LEN", "MIN_LEN"}


@pytest.mark.parametrize("strategy", [None, Strategy.PRIORITY])
def test_priority_strategy_drains_queues_by_rank_and_ties_in_bind_order(
    recorder: Any, strategy: Strategy | None
) -> None:
    def fill(worker: Any) -> None:
        ranked = [
            ("last", None),
            ("five", 5),
            ("one-first", 1),
            ("one-second", 1),
            ("minus", -3),
            ("also-last", None),
        ]
        queues = {name: worker.bind_queue(priority=rank) for name, rank in ranked}
        # Add in an order unrelated to the ranks.
        for i in range(2):
            for name in ["last", "one-second", "five", "also-last", "one-first", "minus"]:
                queues[name].add(f"{name}{i}")

    ran = run_in_order(recorder, strategy, fill)
    assert ran == [
        "minus0",
        "minus1",
        "one-first0",
        "one-first1",
        "one-second0",
        "one-second1",
        "five0",
        "five1",
        "last0",
        "last1",
        "also-last0",
        "also-last1",
    ]


def test_priority_strategy_moves_to_a_better_queue_as_soon_as_it_has_jobs(gate: Any) -> None:
    g = gate()
    worker = varmq.new_worker(g.fn, 1)
    urgent = worker.bind_priority_queue(priority=0)
    bulk = worker.bind_queue(priority=10)
    for i in range(3):
        bulk.add(f"bulk{i}")
    assert g.wait_started(1)
    urgent.add("urgent", 0)
    g.open()
    assert worker.wait(WAIT)
    assert g.started == ["bulk0", "urgent", "bulk1", "bulk2"]


def test_round_robin_takes_one_job_from_each_queue_in_turn(recorder: Any) -> None:
    ran = run_in_order(recorder, Strategy.ROUND_ROBIN, three_queues({"a": 3, "b": 2, "c": 1}))
    assert ran == ["a0", "b0", "c0", "a1", "b1", "a2"]


def test_round_robin_skips_empty_queues(recorder: Any) -> None:
    ran = run_in_order(recorder, Strategy.ROUND_ROBIN, three_queues({"a": 2, "empty": 0, "c": 2}))
    assert ran == ["a0", "c0", "a1", "c1"]


def test_max_len_takes_from_the_longest_queue_first_in_order_on_ties(recorder: Any) -> None:
    ran = run_in_order(recorder, Strategy.MAX_LEN, three_queues({"a": 1, "b": 3, "c": 2}))
    # lengths a1 b3 c2 -> b; a1 b2 c2 -> b (tie: first); a1 b1 c2 -> c; a1 b1 c1 -> a; ...
    assert ran == ["b0", "b1", "c0", "a0", "b2", "c1"]


def test_min_len_takes_from_the_shortest_non_empty_queue(recorder: Any) -> None:
    ran = run_in_order(recorder, Strategy.MIN_LEN, three_queues({"a": 1, "b": 3, "c": 2}))
    # lengths a1 b3 c2 -> a; b3 c2 -> c; b3 c1 -> c; then b.
    assert ran == ["a0", "c0", "c1", "b0", "b1", "b2"]


def test_min_len_ignores_empty_queues(recorder: Any) -> None:
    ran = run_in_order(recorder, Strategy.MIN_LEN, three_queues({"empty": 0, "b": 2, "c": 1}))
    assert ran == ["c0", "b0", "b1"]


@pytest.mark.parametrize("strategy", list(Strategy))
def test_every_strategy_runs_every_job_of_every_queue(recorder: Any, strategy: Strategy) -> None:
    def fill(worker: Any) -> None:
        fifo = worker.bind_queue(priority=2)
        prio = worker.bind_priority_queue(priority=1)
        for i in range(20):
            fifo.add(("fifo", i))
            prio.add(("prio", i), 20 - i)

    ran = run_in_order(recorder, strategy, fill)
    expected = [("fifo", i) for i in range(20)] + [("prio", i) for i in range(20)]
    assert sorted(ran) == sorted(expected)
    assert [i for q, i in ran if q == "fifo"] == list(range(20))
    assert [i for q, i in ran if q == "prio"] == list(range(19, -1, -1))
