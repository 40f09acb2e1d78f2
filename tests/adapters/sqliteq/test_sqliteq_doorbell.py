"""The doorbell: a commit that added jobs wakes the watchers of other processes, and one that
ended job records wakes the watchers that follow record ends.

Every watcher here polls once an hour (``POLL_INTERVAL`` and the worker's ``poll_interval``),
so a job that is noticed within the tests' generous waits was noticed through the bell. The
process tests use real consumer processes (``actors.py listen``): a killed one leaves its
socket behind, a stopped one stops reading its socket.
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import stat
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sqliteq
import sqliteq._doorbell
import sqliteq._watch
import varmq
from tests.adapters.sqliteq.conftest import read_until, spawn_actor

pytestmark = pytest.mark.skipif(not sqliteq._doorbell.SUPPORTED, reason="no AF_UNIX datagrams")

WAIT = 60.0
"""Seconds a test waits for what the bell should bring within milliseconds (the poll it
replaces is an hour)."""


@pytest.fixture
def hour_poll(monkeypatch: pytest.MonkeyPatch) -> None:
    """Watchers made from now on poll once an hour: only the bell wakes them."""
    monkeypatch.setattr(sqliteq._watch, "POLL_INTERVAL", 3600.0)


@pytest.fixture
def consumers() -> Iterator[list[subprocess.Popen[str]]]:
    """Consumer processes started by a test, stopped (or killed) after it."""
    started: list[subprocess.Popen[str]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGCONT)
            process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def listen(
    path: Path, consumers: list[subprocess.Popen[str]]
) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    """A consumer process on ``work`` that only the bell wakes, once it is subscribed, and the
    lines it prints from then on, as they come."""
    process = spawn_actor("listen", str(path))
    consumers.append(process)
    read_until(process, "ready")
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    stdout = process.stdout

    def pump() -> None:
        for line in stdout:
            lines.put(line.strip())

    threading.Thread(target=pump, daemon=True).start()
    return process, lines


def sockets(path: Path) -> list[str]:
    directory = Path(sqliteq._doorbell.bell_directory(str(path)))
    return sorted(p.name for p in directory.iterdir()) if directory.exists() else []


def new_file(tmp_path: Path) -> Path:
    path = tmp_path / "jobs.db"
    with sqliteq.new(path) as made:
        made.new_queue("work")
    return path


def test_a_consumer_process_is_woken_by_the_bell_of_a_producer_process(
    tmp_path: Path, consumers: list[subprocess.Popen[str]]
) -> None:
    path = new_file(tmp_path)
    _, started = listen(path, consumers)
    assert len(sockets(path)) == 1

    with sqliteq.new(path) as producer:
        add = varmq.new_distributed_queue(producer.new_distributed_queue("work")).add
        assert add(None, job_id="first")
        assert started.get(timeout=WAIT) == "start first"


def test_a_killed_consumers_socket_never_fails_producers_and_is_removed(
    tmp_path: Path, consumers: list[subprocess.Popen[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = new_file(tmp_path)
    killed, _ = listen(path, consumers)
    [stale] = sockets(path)
    killed.kill()
    killed.wait()
    assert sockets(path) == [stale]  # SIGKILL: nobody removed it
    monkeypatch.setattr(sqliteq._doorbell, "STALE_AGE", 0.0)  # old enough at once
    _, started = listen(path, consumers)

    with sqliteq.new(path) as producer:
        add = varmq.new_distributed_queue(producer.new_distributed_queue("work")).add
        assert add(None, job_id="first")
        assert started.get(timeout=WAIT) == "start first"
        assert stale not in sockets(path)
        assert len(sockets(path)) == 1  # the live consumer's
        assert add(None, job_id="second")
        assert started.get(timeout=WAIT) == "start second"


def test_a_stopped_consumer_with_a_full_socket_never_blocks_producers(
    tmp_path: Path, consumers: list[subprocess.Popen[str]]
) -> None:
    path = new_file(tmp_path)
    consumer, started = listen(path, consumers)
    # Stopped between writes: a process stopped inside a write transaction holds the file's
    # write lock (SQLite's, for every process), and a new worker's first write is its record
    # in the store (store.workers()), made just after it starts.
    with sqliteq.new(path) as look:
        deadline = time.monotonic() + WAIT
        while not look.workers():
            assert time.monotonic() < deadline, "the consumer's worker never registered"
            time.sleep(0.01)  # no event crosses the process boundary: poll its record
    consumer.send_signal(signal.SIGSTOP)  # reads nothing: its socket buffer fills up
    count = 500

    with sqliteq.new(path) as producer:
        add = varmq.new_distributed_queue(producer.new_distributed_queue("work")).add
        ids = {f"job-{n}" for n in range(count)}
        assert all(add(None, job_id=job_id) for job_id in ids)
        consumer.send_signal(signal.SIGCONT)
        got = {started.get(timeout=WAIT).split()[1] for _ in range(count)}
    assert got == ids


@pytest.mark.parametrize("depth", [1, 4], ids=["short path", "path too long for sun_path"])
def test_a_watcher_in_this_process_is_woken_by_another_handle(
    tmp_path: Path, hour_poll: None, caplog: pytest.LogCaptureFixture, depth: int
) -> None:
    directory = tmp_path.joinpath(*(["d" * 30] * (depth - 1)))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "jobs.db"
    woken = threading.Event()
    consumer = sqliteq.new(path)
    consumer.new_distributed_queue("work").subscribe(lambda message: woken.set())
    [own] = sockets(path)
    assert own.startswith(f"{os.getpid()}-")

    with sqliteq.new(path) as producer:
        assert producer.new_queue("work").enqueue(b"x")
        assert woken.wait(WAIT)
    consumer.close()  # interrupts the hour-long wait
    assert sockets(path) == []  # the socket file goes with its watcher
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("op", ["enqueue", "release", "requeue_dead", "publish"])
def test_every_commit_that_makes_a_job_takeable_rings(
    tmp_path: Path, hour_poll: None, op: str
) -> None:
    path = new_file(tmp_path)
    with sqliteq.new(path) as producer, sqliteq.new(path) as consumer:
        woken = threading.Event()
        consumer.new_distributed_queue("work").subscribe(lambda message: woken.set())
        work = producer.new_queue("work")
        if op == "enqueue":
            assert work.enqueue(b"x")
        elif op == "publish":
            topics = producer.topics()
            topics.bind("orders.*", "work")
            assert topics.publish("orders.new", "x") == 1
        else:
            assert work.enqueue(b"x")
            assert woken.wait(WAIT)  # the add rang; neither the take nor the burial will
            woken.clear()
            taken = work.dequeue_with_ack_id()
            assert taken is not None
            if op == "release":
                assert work.release(taken[1])
            else:
                assert work.dead_letter(taken[1], "failed")
                assert work.requeue_dead() == 1
        assert woken.wait(WAIT)


# A directory the process may not write is the same failure to make the bell directory; it
# cannot be made here for root, who may write anywhere, so the file stands for both.
def test_without_a_bell_directory_watchers_poll_and_nothing_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="sqliteq")
    directory = tmp_path / "db"
    directory.mkdir()
    path = directory / "jobs.db"
    sqliteq.new(path).close()
    bell = Path(sqliteq._doorbell.bell_directory(str(path)))
    bell.write_bytes(b"")  # a file in the way of the bell directory
    woken = threading.Event()
    consumer = sqliteq.new(path)
    consumer.new_distributed_queue("work").subscribe(lambda message: woken.set())
    other = sqliteq.new(path)
    other.new_distributed_queue("work").subscribe(lambda message: None)
    with sqliteq.new(path) as producer:
        assert producer.new_queue("work").enqueue(b"x")
        assert woken.wait(WAIT)  # noticed by the poll
    other.close()
    consumer.close()
    told = [r for r in caplog.records if "no doorbell" in r.getMessage()]
    assert len(told) == 1 and told[0].levelno == logging.INFO
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_file_opened_read_only_makes_no_bell(tmp_path: Path) -> None:
    path = new_file(tmp_path)
    with sqliteq.new(path, create=False, read_only=True) as reader:
        reader.new_distributed_queue("work").subscribe(lambda message: None)
    assert not Path(sqliteq._doorbell.bell_directory(str(path))).exists()


def test_whoever_may_write_the_file_may_ring_and_watch(tmp_path: Path) -> None:
    path = new_file(tmp_path)
    path.chmod(0o660)  # a group shares the queue
    with sqliteq.new(path) as consumer:
        consumer.new_distributed_queue("work").subscribe(lambda message: None)
        bell = Path(sqliteq._doorbell.bell_directory(str(path)))
        [own] = bell.iterdir()
        assert stat.S_IMODE(own.stat().st_mode) == 0o660
        assert stat.S_IMODE(bell.stat().st_mode) == 0o770


# -- record ends ------------------------------------------------------------------------------


def _end(work: Any, how: str) -> None:
    """End ``job-1``, stored in ``work``, ``how``."""
    if how == "cancel":
        assert work.cancel("job-1")
        return
    [(_, ack_id, _)] = work.dequeue_batch_with_attempts(1)
    if how in ("acknowledge", "acknowledge without records"):
        assert work.acknowledge_many([ack_id]) == [True]
    elif how == "fail":
        assert work.fail(ack_id, b'{"type": "KeyError"}')
    else:
        assert work.dead_letter_with_error(ack_id, "failed", b'{"type": "KeyError"}')


@pytest.mark.parametrize(
    "how", ["acknowledge", "fail", "dead_letter", "cancel", "acknowledge without records"]
)
def test_a_commit_that_ends_records_rings_only_the_sockets_that_follow_ends(
    tmp_path: Path, how: str
) -> None:
    path = new_file(tmp_path)
    plain = sqliteq._doorbell.Listener.open(str(path))
    ends = sqliteq._doorbell.Listener.open(str(path), ends=True)
    assert plain is not None and ends is not None
    try:
        with sqliteq.new(path) as producer:
            kept = 0 if how == "acknowledge without records" else 60
            work = producer.new_queue("kept", keep_results=kept)
            assert work.enqueue_dedup(b"x", "job-1")  # an add rings every socket
            assert plain.wait(WAIT) and ends.wait(WAIT)
            _end(work, how)
            # A ring is sent before the call that committed returns: none pending, none sent.
            assert not plain.wait(0)
            assert ends.wait(0) is (kept > 0)
    finally:
        plain.close()
        ends.close()


def test_a_records_subscription_hears_an_end_through_another_handle_at_once(
    tmp_path: Path, hour_poll: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ringers look at the bell directory before every ring (not every half second), so the
    # swapped socket is rung at the first commit after the swap.
    monkeypatch.setattr(sqliteq._doorbell, "RELIST_INTERVAL", 0.0)
    path = new_file(tmp_path)
    told: queue.Queue[str] = queue.Queue()
    with sqliteq.new(path) as waiting, sqliteq.new(path) as working:
        # First a plain subscription, heard once (the watcher has looked, and its periodic
        # check of its socket is seconds away): the socket is swapped for an ends one when
        # the records subscription comes.
        woken = threading.Event()
        waiting.new_distributed_queue("work").subscribe(lambda message: woken.set())
        [plain] = sockets(path)
        assert not plain.endswith(sqliteq._doorbell.ENDS_SUFFIX)
        assert working.new_queue("work").enqueue(b"x")
        assert woken.wait(WAIT)
        waiting.new_queue("kept", keep_results=60).subscribe_records(told.put)
        # The watcher thread binds the ends socket, then removes the plain one; no event
        # tells when it is done.
        deadline = time.monotonic() + WAIT
        while len(swapped := sockets(path)) != 1 or swapped == [plain]:
            assert time.monotonic() < deadline, swapped
            time.sleep(0.01)
        assert swapped[0].endswith(sqliteq._doorbell.ENDS_SUFFIX)
        work = working.new_queue("kept", keep_results=60)
        assert work.enqueue_dedup(b"x", "job-1")
        _end(work, "acknowledge")
        assert told.get(timeout=WAIT) == "job-1"  # an hour's poll: only the bell brings it
