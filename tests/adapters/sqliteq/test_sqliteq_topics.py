"""sqliteq's topics beyond the conformance suite: what only a file has.

The schema step that adds the bindings table, bindings surviving a reopen, copies into a
priority queue, a publisher in another process waking a subscriber here, and a file another
connection keeps locked making every topic write raise instead of losing the publish.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import sqliteq
from sqliteq import _schema
from tests.adapters.sqliteq.conftest import rows
from varmq.contract import envelope

APPLICATION_ID = 0x766D7173


def test_a_version_3_file_gains_the_bindings_table_and_keeps_its_jobs(db_path: Path) -> None:
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    for statements in _schema.MIGRATIONS[:3]:
        for statement in statements:
            conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 3")
    conn.execute("INSERT INTO queues (name, kind) VALUES ('a', 'fifo')")
    conn.execute(
        "INSERT INTO jobs (queue, data, state, enqueued_at, available_at) "
        "VALUES ('a', x'6f6c64', 'ready', 0, 0)"
    )
    conn.close()
    with sqliteq.new(db_path) as queues:
        assert rows(db_path, "PRAGMA user_version") == [(7,)]
        topics = queues.topics()
        assert topics.bindings() == []
        assert topics.bind("orders.#", "a")
        assert topics.publish("orders.new", {"n": 1}) == 1
        q = queues.new_queue("a")
        first = q.dequeue()
        second = q.dequeue()
        assert first == b"old"
        assert second is not None and envelope.decode(second).data == {"n": 1}


def test_bindings_are_kept_in_the_file_across_reopening(db_path: Path) -> None:
    with sqliteq.new(db_path) as queues:
        topics = queues.topics()
        assert topics.bind("orders.*", "eu")
        assert topics.bind("#", "audit")
    with sqliteq.new(db_path) as queues:
        assert queues.topics().bindings() == [("#", "audit"), ("orders.*", "eu")]
        assert queues.topics().publish("orders.new", "x", message_id="m") == 2
        assert sorted(queues.list_queues()) == [("audit", "fifo"), ("eu", "fifo")]


def test_copies_in_a_priority_queue_have_priority_zero(queues: sqliteq.Queues) -> None:
    q = queues.new_priority_queue("p")
    assert q.enqueue(b"urgent", -1) and q.enqueue(b"later", 1)
    topics = queues.topics()
    topics.bind("t", "p")
    assert topics.publish("t", "copy") == 1
    got = [q.dequeue() for _ in range(3)]
    assert got[0] == b"urgent" and got[2] == b"later"
    assert got[1] is not None and envelope.decode(got[1]).data == "copy"
    assert queues.list_queues() == [("p", "priority")]


def test_a_publish_in_another_process_wakes_a_subscriber_and_is_stored_once(
    db_path: Path,
) -> None:
    with sqliteq.new(db_path) as queues:
        queues.topics().bind("orders.#", "orders")
        q = queues.new_distributed_queue("orders")
        woke = threading.Event()
        q.subscribe(lambda action: woke.set() if action == "enqueued" else None)
        script = textwrap.dedent(
            f"""
            import sqliteq
            with sqliteq.new({str(db_path)!r}) as queues:
                topics = queues.topics()
                print(topics.publish("orders.eu", {{"n": 7}}, message_id="order-7"))
                print(topics.publish("orders.eu", {{"n": 7}}, message_id="order-7"))
            """
        )
        done = subprocess.run(
            [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
        )
        assert done.stdout.split() == ["1", "0"]
        assert woke.wait(10), "the copy stored by another process was not announced"
        item = q.dequeue()
        assert item is not None
        assert envelope.decode(item) == ("order-7@orders", {"n": 7}, None, None)
        assert q.dequeue() is None


def test_a_write_locked_file_makes_topic_writes_raise_naming_the_file(db_path: Path) -> None:
    with sqliteq.new(db_path, busy_timeout=0.05) as queues:
        topics = queues.topics()
        topics.bind("t", "q")
        holder = sqlite3.connect(db_path, isolation_level=None)
        holder.execute("BEGIN EXCLUSIVE")
        try:
            for call in (lambda: topics.publish("t", 1), lambda: topics.bind("u", "q")):
                with pytest.raises(sqliteq.StorageUnavailableError, match=str(db_path)) as caught:
                    call()
                assert isinstance(caught.value, OSError)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert topics.publish("t", "after") == 1
        assert len(queues.new_queue("q")) == 1
