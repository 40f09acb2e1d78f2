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

Storage (measured here, in the same run):

5. redisq publish: ``redisq.new(url).topics().publish`` to a topic with 3 bound queues (one
   script call stores the 3 copies, each announced), N messages; baseline: raw redis-py
   ``LPUSH`` of the same JSON envelope (job id, status, data) into 3 lists in one
   non-transactional pipeline per message.
   Target: ratio >= 0.7. Redis: a redis-server started here on a free loopback port
   (``tests/support/redis_server.py``), or the empty database ``VARMQ_TEST_REDIS_URL`` names
   (flushed).
6. sqliteq publish: ``sqliteq.new(path).topics().publish`` with 3 bound queues (one write
   transaction per publish); baseline: raw ``sqlite3``, 3 ``INSERT`` of the same JSON in one
   ``BEGIN IMMEDIATE`` transaction per message, WAL and ``synchronous=NORMAL`` as sqliteq's
   default. A fresh file in a temporary directory for every run. Target: ratio >= 0.7.
7. redisq and sqliteq publish with a ``message_id`` per message, kept for ``dedup_ttl`` (one
   day), against the same publish with ``dedup_ttl=0`` (the copies' own dedup only): what
   keeping the ids costs. No target.

``--no-storage`` leaves 5 to 7 out (no Redis needed).

Every figure is the best of ``--repeat`` runs (default 3), varmq and baseline alternating::

    python benchmarks/topics.py               # 200,000 messages, best of 3
    python benchmarks/topics.py --quick       # 20,000 messages, one run
    python benchmarks/topics.py -n 50000 --only fan-out
    python benchmarks/topics.py --only publish         # the storage rows only
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import platform
import queue
import re
import sqlite3
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from inmemory import print_load

import varmq
from varmq.contract.topic_names import PatternTrie, check_name, check_pattern

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


# -- storage: a publish into 3 bound queues -----------------------------------------------------

BOUND = 3
STORED_NAME = "bench.orders.created"
_ROOT = Path(__file__).resolve().parent.parent


def _import_adapters() -> None:
    """Put the repository root and ``adapters/`` first on ``sys.path``: run as a script,
    ``sys.path[0]`` is ``benchmarks/``, whose redisq.py and sqliteq.py would shadow the
    adapters of the same names."""
    here = _ROOT / "benchmarks"
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    sys.path[:0] = [str(_ROOT), str(_ROOT / "adapters")]


def _envelope(i: int) -> bytes:
    """What a baseline stores per message: the same JSON a copy is stored as (a job id, the
    status, the data), so that both sides write the same bytes."""
    job_id = uuid.uuid4().hex
    return json.dumps(
        {"id": job_id, "status": "Created", "data": {"n": i}}, separators=(",", ":")
    ).encode()


def _bench_queues(tag: str) -> list[str]:
    return [f"bench-{tag}-{time.time_ns()}-{i}" for i in range(BOUND)]


def _timed_publishes(topics: Any, n: int, id_prefix: str | None) -> float:
    """Seconds for ``n`` publishes to STORED_NAME; with ``id_prefix``, each with a fresh
    ``message_id``."""
    publish = topics.publish
    start = time.perf_counter()
    if id_prefix is not None:
        for i in range(n):
            publish(STORED_NAME, {"n": i}, message_id=f"{id_prefix}-{i}")
    else:
        for i in range(n):
            publish(STORED_NAME, {"n": i})
    return time.perf_counter() - start


def redisq_publish(url: str, with_ids: bool = False, dedup_ttl: float = 86_400.0) -> Run:
    import redisq

    def run(n: int) -> float:
        tag = uuid.uuid4().hex
        with redisq.new(url) as queues:
            topics = queues.topics(dedup_ttl=dedup_ttl)
            names = _bench_queues("redisq")
            for name in names:
                topics.bind("bench.#", name)
            elapsed = _timed_publishes(topics, n, tag if with_ids else None)
            _check([len(queues.new_queue(name)) for name in names], n)
            if with_ids:
                queues._client.delete("redisq:{topics}:message_ids")
            for name in names:
                topics.unbind("bench.#", name)
                queues.new_queue(name).purge()
        return elapsed

    return run


def redis_lpush(url: str) -> Run:
    import redis

    def run(n: int) -> float:
        client = redis.Redis.from_url(url)
        names = _bench_queues("lpush")
        pipe = client.pipeline(transaction=False)
        start = time.perf_counter()
        for i in range(n):
            body = _envelope(i)
            for name in names:
                pipe.lpush(name, body)
            pipe.execute()
        elapsed = time.perf_counter() - start
        _check([client.llen(name) for name in names], n)
        client.delete(*names)
        client.close()
        return elapsed

    return run


def sqliteq_publish(n: int, with_ids: bool = False, dedup_ttl: float = 86_400.0) -> float:
    import sqliteq

    tag = uuid.uuid4().hex
    with tempfile.TemporaryDirectory() as tmp, sqliteq.new(Path(tmp) / "topics.db") as queues:
        topics = queues.topics(dedup_ttl=dedup_ttl)
        names = _bench_queues("sqliteq")
        for name in names:
            topics.bind("bench.#", name)
        elapsed = _timed_publishes(topics, n, tag if with_ids else None)
        _check([len(queues.new_queue(name)) for name in names], n)
    return elapsed


def sqliteq_publish_with_ids(n: int) -> float:
    return sqliteq_publish(n, with_ids=True)


def sqliteq_publish_with_ids_not_kept(n: int) -> float:
    return sqliteq_publish(n, with_ids=True, dedup_ttl=0)


def sqlite_inserts(n: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "raw.db", isolation_level=None)
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, queue TEXT, data BLOB)")
        names = _bench_queues("sqlite3")
        insert = "INSERT INTO jobs (queue, data) VALUES (?, ?)"
        start = time.perf_counter()
        for i in range(n):
            body = _envelope(i)
            conn.execute("BEGIN IMMEDIATE")
            for name in names:
                conn.execute(insert, (name, body))
            conn.execute("COMMIT")
        elapsed = time.perf_counter() - start
        counts = dict(conn.execute("SELECT queue, count(*) FROM jobs GROUP BY queue").fetchall())
        conn.close()
    _check([counts.get(name, 0) for name in names], n)
    return elapsed


@contextlib.contextmanager
def redis_url() -> Iterator[tuple[str, str]]:
    """A Redis database for the storage rows, and how it was found, for the heading."""
    from tests.support.redis_database import SuiteDatabase
    from tests.support.redis_server import RedisServer, external_url

    url = external_url()
    server: Any = None
    if url is None:
        server = RedisServer()
        server.start()
        url = server.url
    try:
        SuiteDatabase(url).claim()
        yield url, ("started here" if server is not None else "VARMQ_TEST_REDIS_URL")
    finally:
        if server is not None:
            server.close()


def storage_scenarios(url: str) -> list[Scenario]:
    return [
        Scenario(
            "redisq publish, 3 bound",
            redisq_publish(url),
            redis_lpush(url),
            "3 x LPUSH, 1 pipeline",
            0.7,
            size=lambda n: min(n, 10_000),
        ),
        Scenario(
            "sqliteq publish, 3 bound",
            sqliteq_publish,
            sqlite_inserts,
            "3 x INSERT, 1 transaction",
            0.7,
            size=lambda n: min(n, 5_000),
        ),
        # What keeping message ids for dedup_ttl costs: against the same publish without ids.
        Scenario(
            "redisq publish, ids kept",
            redisq_publish(url, with_ids=True),
            redisq_publish(url, with_ids=True, dedup_ttl=0),
            "the same, dedup_ttl=0",
            size=lambda n: min(n, 10_000),
        ),
        Scenario(
            "sqliteq publish, ids kept",
            sqliteq_publish_with_ids,
            sqliteq_publish_with_ids_not_kept,
            "the same, dedup_ttl=0",
            size=lambda n: min(n, 5_000),
        ),
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=200_000, help="messages per run (200000)")
    parser.add_argument("--repeat", type=int, default=3, help="runs per figure, best kept")
    parser.add_argument("--quick", action="store_true", help="20000 messages, one run")
    parser.add_argument("--only", action="append", help="only scenarios containing this")
    parser.add_argument("--no-storage", action="store_true", help="leave out Redis and SQLite")
    args = parser.parse_args(argv)
    n, repeat = (20_000, 1) if args.quick else (args.n, args.repeat)
    wanted = [s for s in SCENARIOS if not args.only or any(o in s.name for o in args.only)]
    storage = not args.no_storage and (
        not args.only
        or any(o in "redisq publish sqliteq publish, 3 bound, ids kept" for o in args.only)
    )

    print(
        f"varmq topics benchmark: Python {platform.python_version()} "
        f"({platform.python_implementation()}, {platform.system()} {platform.machine()}), "
        f"{os.cpu_count()} CPUs, best of {repeat}"
    )
    with contextlib.ExitStack() as stack:
        if storage:
            _import_adapters()
            url, found = stack.enter_context(redis_url())
            print(f"Redis for the storage rows: {url} ({found})")
            wanted += [
                s
                for s in storage_scenarios(url)
                if not args.only or any(o in s.name for o in args.only)
            ]
        print_load("at start")
        print()
        header = (
            f"| {'scenario':<24} | {'baseline':<26} | {'N':>7} | {'varmq msg/s':>12} "
            f"| {'baseline msg/s':>14} | {'ratio':>5} | {'ratio range':>11} | {'target':<12} |"
        )
        print(header)
        print("|" + "|".join("-" * len(cell) for cell in header.split("|")[1:-1]) + "|")
        for scenario in wanted:
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
                f"| {scenario.name:<24} | {scenario.baseline_name:<26} | {size:>7} "
                f"| {size / min(ours):>12,.0f} | {size / min(theirs):>14,.0f} | {ratio:>5.2f} "
                f"| {spread:>11} | {target:<12} |",
                flush=True,
            )
    print()
    print_load("at end")
    print("ratio = varmq msg/s / baseline msg/s of the best runs (higher is better for varmq);")
    print("ratio range: the ratios of the runs paired in turn. Matching: names per second.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
