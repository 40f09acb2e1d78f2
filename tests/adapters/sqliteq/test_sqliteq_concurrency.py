"""sqliteq: concurrent takers (threads, processes), the write lock, and enqueue notifications.

Waits use ``threading.Event`` with a timeout or a child process's own output; nothing sleeps.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

import pytest

import sqliteq

# Run alone by the test command:
# processes racing to create one file, and threads against SQLite's locks.
pytestmark = pytest.mark.serial

ADAPTERS = str(Path(__file__).resolve().parents[3] / "adapters")
WAIT = 10.0


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ADAPTERS, env.get("PYTHONPATH")]))
    return env


def fill(path: Path, name: str, count: int) -> set[str]:
    with sqliteq.new(path) as queues:
        q = queues.new_queue(name)
        for i in range(count):
            assert q.enqueue(f"job-{i}")
    return {f"job-{i}" for i in range(count)}


def drain(q: sqliteq.Queue, batch: int, together: threading.Barrier) -> list[str]:
    """Take and acknowledge until a take comes back empty.

    After its first take each thread waits at ``together``: all of them hold leases at once, so
    the takes really overlapped (left alone, one thread may drain a small queue by itself).
    """
    seen = []
    taken = q.dequeue_batch_with_ack_ids(batch)
    together.wait(WAIT)
    while taken:
        assert all(q.acknowledge_many([ack for _, ack in taken]))
        seen.extend(data.decode() for data, _ in taken)
        taken = q.dequeue_batch_with_ack_ids(batch)
    return seen


# --- threads -------------------------------------------------------------------------------------


@pytest.mark.parametrize("shared", [True, False], ids=["one-connection", "eight-connections"])
def test_eight_threads_take_every_job_exactly_once_without_lock_errors(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, shared: bool
) -> None:
    path = tmp_path / "jobs.db"
    expected = fill(path, "work", 2000)
    opened = [sqliteq.new(path) for _ in range(1 if shared else 8)]
    start, together = threading.Barrier(8), threading.Barrier(8)
    results: list[list[str]] = [[] for _ in range(8)]
    errors: list[BaseException] = []

    def worker(index: int) -> None:
        try:
            q = opened[index % len(opened)].new_queue("work")
            start.wait(WAIT)
            results[index] = drain(q, 1 + index % 4, together)
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    with caplog.at_level(logging.WARNING, logger="sqliteq"):
        threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(WAIT * 3)
    for queues in opened:
        queues.close()
    assert errors == []
    assert caplog.records == []  # no "database is locked", no failed take
    taken = Counter(job for result in results for job in result)
    assert set(taken) == expected and max(taken.values()) == 1
    assert all(results)


def test_a_take_that_cannot_get_the_write_lock_raises_naming_the_file_and_warns_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "jobs.db"
    fill(path, "work", 3)
    queues = sqliteq.new(path, busy_timeout=0.01)
    q = queues.new_queue("work")
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        with caplog.at_level(logging.WARNING, logger="sqliteq"):
            for _ in range(3):
                with pytest.raises(sqliteq.StorageUnavailableError, match="locked") as raised:
                    q.dequeue_batch_with_ack_ids(2)
                assert isinstance(raised.value, OSError) and str(path) in str(raised.value)
                assert raised.value.op == "take"
                assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
            with pytest.raises(sqliteq.StorageUnavailableError):
                q.enqueue(b"x")
        assert len(q) == 3  # reads are not blocked by a writer in WAL mode
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    messages = [r.getMessage() for r in caplog.records]
    assert sum(m.startswith("sqliteq: take on") for m in messages) == 1  # once per outage
    assert all("jobs.db" in m for m in messages)
    assert len(q.dequeue_batch_with_ack_ids(5)) == 3  # nothing was taken or added meanwhile
    queues.close()


def test_eight_connections_enqueueing_at_once_never_exceed_the_capacity(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    opened = [sqliteq.new(path) for _ in range(8)]
    start = threading.Barrier(8)
    accepted = [0] * 8
    errors: list[BaseException] = []

    def producer(index: int) -> None:
        try:
            q = opened[index].new_queue("work")
            q.set_capacity(50)
            start.wait(WAIT)
            accepted[index] = sum(q.enqueue(f"job-{index}-{i}") for i in range(40))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads = [threading.Thread(target=producer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT * 3)
    stored = len(opened[0].new_queue("work"))
    for queues in opened:
        queues.close()
    assert errors == []
    assert sum(accepted) == stored == 50


# --- processes -----------------------------------------------------------------------------------

CONSUMER = """
import logging, sys
import sqliteq
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
queues = sqliteq.new(sys.argv[1])
q = queues.new_queue("shared")
batch = int(sys.argv[2])
print("ready", flush=True)
sys.stdin.readline()  # "go": both processes start taking together
taken = q.dequeue_batch_with_ack_ids(batch)
print("took", len(taken), flush=True)
sys.stdin.readline()  # "go" again once both hold leased jobs at the same time
while taken:
    assert all(q.acknowledge_many([ack for _, ack in taken]))
    for data, _ in taken:
        print(data.decode())
    taken = q.dequeue_batch_with_ack_ids(batch)
queues.close()
"""


def test_two_processes_take_every_job_exactly_once(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    expected = fill(path, "shared", 3000)
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CONSUMER, str(path), str(batch)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env(),
        )
        for batch in (1, 3)
    ]
    try:
        for child in children:
            assert child.stdout is not None
            assert child.stdout.readline().strip() == "ready"
        outputs = []
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        # Both hold leases at once: the takes really overlapped. (Left alone, one process can
        # drain a small queue while the other sleeps in SQLite's busy handler.)
        for child in children:
            assert child.stdout is not None and child.stdin is not None
            assert child.stdout.readline().split()[0] == "took"
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        for child in children:
            out, err = child.communicate(timeout=60)
            assert child.returncode == 0, err
            assert err == "", err  # no warning: no lock error, no failed take
            outputs.append(out.split())
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
    taken = Counter(job for out in outputs for job in out)
    assert set(taken) == expected and max(taken.values()) == 1
    assert all(outputs)


# --- notifications -------------------------------------------------------------------------------

PRODUCER = """
import sys
import sqliteq
queues = sqliteq.new(sys.argv[1])
assert queues.new_distributed_queue(sys.argv[2]).enqueue(b"from another process")
queues.close()
"""


def test_subscriber_hears_an_enqueue_from_another_process(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    with sqliteq.new(path) as queues:
        q = queues.new_distributed_queue("events")
        heard = threading.Event()
        messages: list[str] = []
        q.subscribe(lambda message: (messages.append(message), heard.set()))
        subprocess.run(
            [sys.executable, "-c", PRODUCER, str(path), "events"],
            check=True,
            env=child_env(),
            timeout=60,
        )
        assert heard.wait(WAIT)
        assert set(messages) == {"enqueued"}
        assert q.values() == [b"from another process"]


def test_subscriber_hears_enqueues_from_another_connection_and_from_its_own(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    with sqliteq.new(path) as listener, sqliteq.new(path) as producer:
        q = listener.new_distributed_priority_queue("events")
        heard = threading.Event()
        q.subscribe(lambda _: heard.set())
        assert producer.new_distributed_priority_queue("events").enqueue(b"a", 1)
        assert heard.wait(WAIT)
        heard.clear()
        assert q.enqueue(b"b", 2)
        assert heard.wait(WAIT)


def test_subscriber_is_not_called_for_other_queues(tmp_path: Path) -> None:
    with sqliteq.new(tmp_path / "jobs.db") as queues:
        mine, other = queues.new_distributed_queue("mine"), queues.new_distributed_queue("other")
        mine_calls: list[str] = []
        mine_heard, other_heard = threading.Event(), threading.Event()
        mine.subscribe(lambda m: (mine_calls.append(m), mine_heard.set()))
        other.subscribe(lambda _: other_heard.set())
        other.enqueue(b"x")
        assert other_heard.wait(WAIT)  # the watcher has seen that commit
        assert mine_calls == []
        mine.enqueue(b"y")
        assert mine_heard.wait(WAIT)


def test_a_failing_callback_does_not_stop_notifications(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with sqliteq.new(tmp_path / "jobs.db") as queues:
        q = queues.new_distributed_queue("events")
        heard = threading.Event()

        def broken(_: str) -> None:
            raise RuntimeError("subscriber bug")

        q.subscribe(broken)
        q.subscribe(lambda _: heard.set())
        with caplog.at_level(logging.WARNING, logger="sqliteq"):
            for item in (b"a", b"b"):
                heard.clear()
                q.enqueue(item)
                assert heard.wait(WAIT)
        assert sum("callback" in r.getMessage() for r in caplog.records) == 1


def test_closing_queues_stops_the_watcher_thread(tmp_path: Path) -> None:
    queues = sqliteq.new(tmp_path / "jobs.db")
    q = queues.new_distributed_queue("events")
    q.subscribe(lambda _: None)
    assert any(t.name == "sqliteq:watch" for t in threading.enumerate())
    queues.close()
    assert not any(t.name == "sqliteq:watch" for t in threading.enumerate())


def test_no_watcher_thread_runs_without_a_subscriber(tmp_path: Path) -> None:
    with sqliteq.new(tmp_path / "jobs.db") as queues:
        queues.new_distributed_queue("events").enqueue(b"a")
        assert not any(t.name == "sqliteq:watch" for t in threading.enumerate())


OPENER = """
import sys, sqliteq
queues = sqliteq.new(sys.argv[1])  # must not refuse a file another process is setting up
queues.new_queue("q").enqueue(b"x")
queues.close()
"""


def test_processes_opening_a_new_file_at_once_all_get_it(tmp_path: Path) -> None:
    for round_ in range(16):
        path = str(tmp_path / f"jobs-{round_}.db")
        openers = [subprocess.Popen([sys.executable, "-c", OPENER, path]) for _ in range(6)]
        codes = [opener.wait(timeout=60) for opener in openers]
        assert codes == [0] * 6, f"round {round_}: a process was refused the file being created"
        queues = sqliteq.new(path)
        try:
            assert len(queues.new_queue("q")) == 6
        finally:
            queues.close()
