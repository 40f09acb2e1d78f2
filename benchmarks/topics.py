"""Topics: publishing one message to many subscribers, against the standard library doing the
same copies, in this process and this run.

In memory (measured here):

1. fan-out: ``varmq.new_topics()`` with 10 subscribers of ``orders.#``, one publisher
   publishing N messages to ``orders.eu.created``; baseline: a plain loop putting each message
   into 10 ``queue.SimpleQueue``. Only the publishing is timed (nobody reads meanwhile, and
   every buffer holds N), then every copy is counted. Target: ratio >= 0.5.
2. fan-out, read: the same with a reader thread per subscriber (or queue) reading as the
   publisher goes, subscribers with the default ``max_pending=1000`` and ``on_full="block"``;
   timed until every reader has every message. No target (the GIL's scheduling dominates).
3. stuck subscriber: 9 readers' subscribers as in 1, plus one ``drop_oldest`` subscriber of 10
   messages that nobody reads; baseline: the same 10 subscribers, nobody stuck. The ratio is
   how flat the publisher's latency stays. No target.
4. matching: the patterns that match a name, for names never seen (no route kept), by the
   trie varmq uses, against one compiled regular expression per pattern; 10 and 1,000
   patterns. No target.

Storage (not measured yet: they come with ``topics()`` of the adapters, see ``_storage_rows``):
Redis, a publish to a topic with 3 bound queues against raw redis-py ``LPUSH`` into the 3 lists
in one pipeline per message, target >= 0.7; SQLite, against 3 ``INSERT`` in one transaction,
target >= 0.7.

Every figure is the best of ``--repeat`` runs (default 3), varmq and baseline alternating::

    python benchmarks/topics.py               # 200,000 messages, best of 3
    python benchmarks/topics.py --quick       # 20,000 messages, one run
    python benchmarks/topics.py -n 50000 --only fan-out
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import queue
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from inmemory import print_load

import varmq
from varmq.topic_names import PatternTrie, check_name, check_pattern

SUBSCRIBERS = 10
NAME = "orders.eu.created"


# -- one timed run each; every function returns elapsed seconds ------------------------------


def simplequeue_fan_out(n: int) -> float:
    queues = [queue.SimpleQueue[tuple[str, int]]() for _ in range(SUBSCRIBERS)]
    start = time.perf_counter()
    for i in range(n):
        message = (NAME, i)
        for q in queues:
            q.put(message)
    elapsed = time.perf_counter() - start
    _check([q.qsize() for q in queues], n)
    return elapsed


def varmq_fan_out_read(n: int) -> float:
    topics = varmq.new_topics()
    subscriptions = [topics.subscribe("orders.#") for _ in range(SUBSCRIBERS)]
    counts = [0] * SUBSCRIBERS

    def read(index: int) -> None:
        seen = 0
        for _ in subscriptions[index]:
            seen += 1
            if seen == n:
                break
        counts[index] = seen

    readers = [threading.Thread(target=read, args=(i,)) for i in range(SUBSCRIBERS)]
    for reader in readers:
        reader.start()
    publish = topics.publish
    start = time.perf_counter()
    for i in range(n):
        publish(NAME, i)
    for reader in readers:
        reader.join()
    elapsed = time.perf_counter() - start
    _check(counts, n)
    return elapsed


def simplequeue_fan_out_read(n: int) -> float:
    queues = [queue.SimpleQueue[tuple[str, int]]() for _ in range(SUBSCRIBERS)]
    counts = [0] * SUBSCRIBERS

    def read(index: int) -> None:
        get = queues[index].get
        for _ in range(n):
            get()
        counts[index] = n

    readers = [threading.Thread(target=read, args=(i,)) for i in range(SUBSCRIBERS)]
    for reader in readers:
        reader.start()
    start = time.perf_counter()
    for i in range(n):
        message = (NAME, i)
        for q in queues:
            q.put(message)
    for reader in readers:
        reader.join()
    elapsed = time.perf_counter() - start
    _check(counts, n)
    return elapsed


def _with_subscribers(n: int, stuck: bool) -> float:
    """Publish ``n`` messages to 10 subscribers that hold them all, or to 9 of them and one
    ``drop_oldest`` subscriber of 10 that nobody reads (``stuck``)."""
    topics = varmq.new_topics()
    subscriptions = [topics.subscribe("orders.#", max_pending=n) for _ in range(SUBSCRIBERS - 1)]
    if stuck:
        topics.subscribe("orders.#", max_pending=10, on_full="drop_oldest")
    else:
        subscriptions.append(topics.subscribe("orders.#", max_pending=n))
    publish = topics.publish
    start = time.perf_counter()
    for i in range(n):
        publish(NAME, i)
    elapsed = time.perf_counter() - start
    _check([len(s) for s in subscriptions], n)
    return elapsed


def varmq_stuck(n: int) -> float:
    return _with_subscribers(n, stuck=True)


def varmq_not_stuck(n: int) -> float:
    return _with_subscribers(n, stuck=False)


def _patterns(count: int) -> list[str]:
    """``count`` patterns over names ``orders.<region>.<event>``, a few with wildcards."""
    shapes = ["orders.r{i}.created", "orders.*.e{i}", "orders.r{i}.#", "#.e{i}"]
    return [shapes[i % len(shapes)].format(i=i) for i in range(count)]


def _names(n: int) -> list[str]:
    return [f"orders.r{i % 997}.e{i % 1009}" for i in range(n)]


def trie_matching(patterns: Sequence[str]) -> Callable[[int], float]:
    def run(n: int) -> float:
        trie: PatternTrie[str] = PatternTrie()
        for pattern in patterns:
            trie.add(check_pattern(pattern), pattern)
        names = [check_name(name) for name in _names(n)]
        match = trie.match
        start = time.perf_counter()
        for name in names:
            match(name)
        return time.perf_counter() - start

    return run


def _regex(pattern: str) -> re.Pattern[str]:
    """The pattern as a regular expression over ``"." + name``: one word is ``\\.[^.]+``."""
    parts = []
    for word in pattern.split("."):
        if word == "*":
            parts.append(r"\.[^.]+")
        elif word == "#":
            parts.append(r"(?:\.[^.]+)*")
        else:
            parts.append(r"\." + re.escape(word))
    return re.compile("".join(parts))


def regex_matching(patterns: Sequence[str]) -> Callable[[int], float]:
    def run(n: int) -> float:
        compiled = [(p, _regex(p).fullmatch) for p in patterns]
        names = ["." + name for name in _names(n)]
        start = time.perf_counter()
        for name in names:
            [p for p, fullmatch in compiled if fullmatch(name)]
        return time.perf_counter() - start

    return run


def _check(counts: Sequence[int], n: int) -> None:
    if any(count != n for count in counts):
        raise SystemExit(f"benchmark error: copies per subscriber {list(counts)}, expected {n}")


# -- running and printing ----------------------------------------------------------------------

Run = Callable[[int], float]


@dataclass
class Scenario:
    name: str
    varmq: Run
    baseline: Run
    baseline_name: str
    target: float | None = None
    size: Callable[[int], int] = lambda n: n


SCENARIOS = [
    Scenario("fan-out", varmq_not_stuck, simplequeue_fan_out, "10 x SimpleQueue.put", 0.5),
    Scenario("fan-out, read", varmq_fan_out_read, simplequeue_fan_out_read, "10 x put/get"),
    Scenario("stuck subscriber", varmq_stuck, varmq_not_stuck, "nobody stuck (varmq)"),
    Scenario(
        "match 10 patterns",
        trie_matching(_patterns(10)),
        regex_matching(_patterns(10)),
        "a regex per pattern",
        size=lambda n: min(n, 100_000),
    ),
    Scenario(
        "match 1000 patterns",
        trie_matching(_patterns(1000)),
        regex_matching(_patterns(1000)),
        "a regex per pattern",
        size=lambda n: min(n, 5_000),
    ),
]


def timed(run: Run, n: int) -> float:
    gc.collect()
    return run(n)


def measure(scenario: Scenario, n: int, repeat: int) -> tuple[list[float], list[float]]:
    """Every time of each side over ``repeat`` runs, alternating which goes first."""
    ours: list[float] = []
    theirs: list[float] = []
    for i in range(repeat):
        if i % 2 == 0:
            ours.append(timed(scenario.varmq, n))
            theirs.append(timed(scenario.baseline, n))
        else:
            theirs.append(timed(scenario.baseline, n))
            ours.append(timed(scenario.varmq, n))
    return ours, theirs


def _storage_rows() -> list[str]:
    """The storage scenarios: measured once ``sqliteq.Queues.topics()`` and
    ``redisq.Queues.topics()`` exist (the adapters' task); until then, said as pending."""
    rows = []
    for adapter, baseline in (
        ("redisq", "3 x LPUSH, 1 pipeline"),
        ("sqliteq", "3 x INSERT, 1 transaction"),
    ):
        rows.append(
            f"| {adapter + ' publish, 3 bound':<20} | {baseline:<26} | not measured yet: "
            f"{adapter} has no topics(); target >= 0.70 |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200_000, help="messages per run (200000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure, best kept")
    parser.add_argument("--quick", action="store_true", help="20000 messages, one run")
    parser.add_argument("--only", action="append", help="only scenarios containing this")
    args = parser.parse_args(argv)
    n, repeat = (20_000, 1) if args.quick else (args.n, args.repeat)

    print(
        f"varmq topics benchmark: Python {platform.python_version()} "
        f"({platform.python_implementation()}, {platform.system()} {platform.machine()}), "
        f"{os.cpu_count()} CPUs, best of {repeat}"
    )
    print_load("at start")
    print()
    header = (
        f"| {'scenario':<20} | {'baseline':<26} | {'N':>7} | {'varmq msg/s':>12} "
        f"| {'baseline msg/s':>14} | {'ratio':>5} | {'ratio range':>11} | {'target':<12} |"
    )
    print(header)
    print("|" + "|".join("-" * len(cell) for cell in header.split("|")[1:-1]) + "|")
    for scenario in SCENARIOS:
        if args.only and not any(o in scenario.name for o in args.only):
            continue
        size = scenario.size(n)
        ours, theirs = measure(scenario, size, repeat)
        ratio = min(theirs) / min(ours)
        ratios = sorted(t / o for o, t in zip(ours, theirs, strict=True))
        spread = f"{ratios[0]:.2f}-{ratios[-1]:.2f}"
        target = ""
        if scenario.target is not None:
            met = "met" if ratio >= scenario.target else "MISSED"
            target = f">= {scenario.target:.2f} {met}"
        print(
            f"| {scenario.name:<20} | {scenario.baseline_name:<26} | {size:>7} "
            f"| {size / min(ours):>12,.0f} | {size / min(theirs):>14,.0f} | {ratio:>5.2f} "
            f"| {spread:>11} | {target:<12} |",
            flush=True,
        )
    if not args.only:
        for row in _storage_rows():
            print(row)
    print()
    print_load("at end")
    print("ratio = varmq msg/s / baseline msg/s of the best runs (higher is better for varmq);")
    print("ratio range: the ratios of the runs paired in turn. Matching: names per second.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
