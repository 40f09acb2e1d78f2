"""Acceptance: topics across real processes, on a sqliteq file and a redis-server at once.

Two durable bindings ``orders.#``, one to a sqliteq queue and one to a redisq queue. A
publisher process publishes 2,000 messages on ``orders.<n>`` names with message ids through the
topics of both stores; one consumer process per queue runs the copies. Every message id is
counted in each queue's log: each arrives exactly once, except that a consumer killed with
SIGKILL mid-run (and restarted) may leave a copy it had started to run again. The first 1,000
messages are published, then published again as a producer that lost the replies would,
before any consumer runs: the retry stores nothing. And a live Redis subscriber survives a
restart of redis-server and receives what a publisher process publishes after it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import redisq
import sqliteq
from tests.support.redis_server import RedisServer

pytestmark = pytest.mark.timeout(90)

ROOT = Path(__file__).resolve().parents[2]
MESSAGES = 2_000
DEADLINE = 60.0


def _spawn(module: str, *args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT)


def _run(module: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=DEADLINE,
        check=True,
    )
    return done.stdout.strip()


class Consumer:
    """One consumer process of one queue (``tests.acceptance.actors consume``), restartable."""

    def __init__(self, store: str, queue: str, tmp: Path, tag: str) -> None:
        self.store, self.queue, self.tmp, self.tag = store, queue, tmp, tag
        self.logs: list[Path] = []
        self.killed: list[Path] = []
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = self.tmp / f"{self.tag}-{len(self.logs)}.log"
        self.logs.append(log)
        self.process = _spawn(
            "tests.acceptance.actors", "consume", self.store, self.queue, str(log), "4"
        )

    def lines(self, log: Path) -> list[str]:
        try:
            return log.read_text().splitlines()
        except FileNotFoundError:
            return []

    def done(self) -> Counter[str]:
        counts: Counter[str] = Counter()
        for log in self.logs:
            counts.update(line[5:] for line in self.lines(log) if line.startswith("done "))
        return counts

    def started_by_killed(self) -> set[str]:
        return {
            line[6:] for log in self.killed for line in self.lines(log) if line.startswith("start ")
        }

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()
        self.killed.append(self.logs[-1])

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            assert self.process.wait(timeout=30) == 0, "a consumer did not stop cleanly"


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer(appendonly=True)
    server.start()
    yield server
    server.close()


def _wait(predicate: Callable[[], bool], what: Callable[[], str]) -> None:
    deadline = time.monotonic() + DEADLINE
    while not predicate():
        assert time.monotonic() < deadline, what()
        time.sleep(0.05)


def test_every_published_message_arrives_once_in_each_bound_queue_across_processes(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    path, url = str(tmp_path / "jobs.db"), redis_server.url
    queue = f"orders-{time.time_ns()}"
    with sqliteq.new(path) as files:
        assert files.topics().bind("orders.#", queue)
    with redisq.new(url) as server:
        assert server.topics().bind("orders.#", queue)

    # The first half, published and then retried before anything consumed it.
    half = MESSAGES // 2
    assert _run("tests.acceptance.topic_actors", "publish", path, url, "0", str(half), "retry") == (
        f"stored {2 * half} retried 0"
    )

    consumers = [
        Consumer(f"sqlite:{path}", queue, tmp_path, "sqliteq"),
        Consumer(url, queue, tmp_path, "redisq"),
    ]
    try:
        for consumer in consumers:
            consumer.start()
        publisher = _spawn(
            "tests.acceptance.topic_actors", "publish", path, url, str(half), str(MESSAGES - half)
        )
        for consumer in consumers:  # each killed once mid-run, and started again
            _wait(
                lambda c=consumer: sum(c.done().values()) >= half // 2,
                lambda c=consumer: f"{c.tag}: only {len(c.done())} copies ran",
            )
            consumer.kill()
            consumer.start()
        assert publisher.wait(timeout=DEADLINE) == 0
        expected = {f"order-{n}@{queue}" for n in range(MESSAGES)}
        for consumer in consumers:
            _wait(
                lambda c=consumer: expected <= set(c.done()),
                lambda c=consumer: (
                    f"{c.tag}: {len(expected - set(c.done()))} of {MESSAGES} copies never ran"
                ),
            )
        for consumer in consumers:
            consumer.stop()
    finally:
        for consumer in consumers:
            if consumer.process is not None and consumer.process.poll() is None:
                consumer.process.kill()
                consumer.process.wait()
    report = []
    for consumer in consumers:
        done = consumer.done()
        assert set(done) == expected, f"{consumer.tag}: copies of other messages ran"
        twice = {job for job, n in done.items() if n > 1}
        assert twice <= consumer.started_by_killed(), (
            f"{consumer.tag}: a copy ran twice although no consumer running it died"
        )
        report.append(f"{consumer.tag}: {len(done)} copies, {len(twice)} ran twice after the kill")
    with sqliteq.new(path) as files:
        assert len(files.new_queue(queue)) == 0
    print("\n" + "; ".join(report))


def test_a_live_redis_subscriber_survives_a_restart_and_receives_later_publishes(
    redis_server: RedisServer,
) -> None:
    with redisq.new(redis_server.url) as server:
        live = server.topics().subscribe("orders.#")
        assert (
            _run("tests.acceptance.topic_actors", "publish-redis", redis_server.url, "0", "5")
            == "0"
        )
        before = [live.get(10) for _ in range(5)]
        assert [m.message_id for m in before if m is not None] == [f"order-{n}" for n in range(5)]

        redis_server.restart()
        _wait(
            lambda: live.reconnects >= 1 and live.connected,
            lambda: f"the subscriber did not reconnect (reconnects={live.reconnects})",
        )
        assert (
            _run("tests.acceptance.topic_actors", "publish-redis", redis_server.url, "5", "50")
            == "0"
        )
        after = [live.get(10) for _ in range(50)]
        assert [(m.name, m.data, m.message_id) for m in after if m is not None] == [
            (f"orders.{n % 7}", {"n": n}, f"order-{n}") for n in range(5, 55)
        ]
        assert live.active and live.dropped == 0 and live.missed >= 0
        live.unsubscribe()
