"""Job records in the file: the version-6 upgrade, read-only reads, a locked file, what the
file holds and for how long, and the indexes each record statement relies on.

The semantics every storage shares are in the conformance suite (``conformance_records``);
these are the parts only sqliteq has.
"""

from __future__ import annotations

import re
import sqlite3
import threading
from pathlib import Path

import pytest

import sqliteq
from sqliteq import _schema, _sql
from tests.adapters.sqliteq.conftest import rows, undo_version_6, undo_version_7
from varmq.testing import FakeWallClock


def test_a_version_5_file_is_upgraded_and_keeps_its_jobs(db_path: Path) -> None:
    with sqliteq.new(db_path) as store:
        q = store.new_priority_queue("work")
        assert q.enqueue(b"second", 5) and q.enqueue(b"first", 1)
        assert q.enqueue_dedup(b"held", "job-1", 9)
        assert q.enqueue_delayed(b"later", 3600, "job-2", 0)
        taken = q.dequeue_with_ack_id()
        assert taken is not None and taken[0] == b"first"
    conn = sqlite3.connect(db_path)
    undo_version_6(conn)
    conn.commit()
    conn.close()
    assert rows(db_path, "PRAGMA user_version") == [(5,)]

    with sqliteq.new(db_path) as store:
        assert rows(db_path, "PRAGMA user_version") == [(_schema.SCHEMA_VERSION,)] == [(7,)]
        q = store.new_priority_queue("work", keep_results=60)
        stats = q.stats()
        counts = (stats["waiting"], stats["in_flight"], stats["delayed"], stats["dead"])
        assert counts == (2, 1, 1, 0)
        assert q.values() == [b"second", b"held"]
        assert q.enqueue_dedup(b"again", "job-1", 0)  # still held by the stored job
        assert q.job_record("job-1") is None  # added before records: it has none
        assert q.enqueue_dedup(b"new", "job-3", 0)
        record = q.job_record("job-3")
        assert record is not None and record["state"] == "queued"
        [(data, ack_id, attempt)] = q.dequeue_batch_with_attempts(1)
        assert (data, attempt) == (b"new", 1)
        assert q.acknowledge_with_results([(ack_id, b'"ok"')]) == [True]
        record = q.job_record("job-3")
        assert record is not None and (record["state"], record["result"]) == ("succeeded", b'"ok"')
        assert [d for d, _ in q.dequeue_batch_with_ack_ids(5)] == [b"second", b"held"]


def test_a_version_6_file_gains_job_progress_and_keeps_its_jobs_leases_and_records(
    db_path: Path,
) -> None:
    with sqliteq.new(db_path) as store:
        q = store.new_queue("work", keep_results=60)
        assert q.enqueue_dedup(b"a", "ended") and q.enqueue_dedup(b"b", "running")
        [(_, ack_id, _)] = q.dequeue_batch_with_attempts(1)
        assert q.acknowledge_with_results([(ack_id, b'"ok"')]) == [True]
        [(_, running, _)] = q.dequeue_batch_with_attempts(1)
    conn = sqlite3.connect(db_path)
    undo_version_7(conn)
    conn.commit()
    conn.close()
    assert rows(db_path, "PRAGMA user_version") == [(6,)]

    with sqliteq.new(db_path) as store:
        assert rows(db_path, "PRAGMA user_version") == [(_schema.SCHEMA_VERSION,)] == [(7,)]
        for table in ("jobs", "job_records"):
            columns = [row[1] for row in rows(db_path, f"PRAGMA table_info({table})")]
            assert columns[-1] == "progress"
        q = store.new_queue("work", keep_results=60)
        ended = q.job_record("ended")
        assert ended is not None and (ended["state"], ended["result"]) == ("succeeded", b'"ok"')
        assert ended["progress"] is None
        record = q.job_record("running")
        assert record is not None and (record["state"], record["progress"]) == ("running", None)
        assert q.set_progress(running, b"half") is True  # a lease taken before the upgrade
        record = q.job_record("running")
        assert record is not None and record["progress"] == b"half"
        assert q.acknowledge(running) is True
        record = q.job_record("running")
        assert record is not None and (record["state"], record["progress"]) == (
            "succeeded",
            b"half",
        )


def test_a_read_only_open_reads_records(db_path: Path) -> None:
    with sqliteq.new(db_path) as store:
        q = store.new_queue("work", keep_results=3600)
        assert q.enqueue_dedup(b"a", "done") and q.enqueue_dedup(b"b", "waiting")
        taken = q.dequeue_with_ack_id()
        assert taken is not None
        assert q.acknowledge_with_results([(taken[1], b'{"total": 3}')]) == [True]
    with sqliteq.new(db_path, create=False, read_only=True) as store:
        q = store.open_queue("work")
        record = q.job_record("done")
        assert record is not None
        assert (record["state"], record["result"], record["attempts"]) == (
            "succeeded",
            b'{"total": 3}',
            1,
        )
        waiting = q.job_record("waiting")
        assert waiting is not None and waiting["state"] == "queued"
        assert q.job_record("never") is None
        with pytest.raises(sqliteq.ReadOnlyError):
            q.cancel("waiting")


def test_record_writes_on_a_file_locked_past_busy_timeout_raise_storage_unavailable(
    db_path: Path,
) -> None:
    with sqliteq.new(db_path, busy_timeout=0.2) as store:
        q = store.new_queue("work", keep_results=60)
        assert q.enqueue_dedup(b"a", "running") and q.enqueue_dedup(b"b", "queued")
        taken = q.dequeue_with_ack_id()
        assert taken is not None
        ack_id = taken[1]
        blocker = sqlite3.connect(db_path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            writes = [
                lambda: q.cancel("queued"),
                lambda: q.fail(ack_id, b"{}"),
                lambda: q.acknowledge_with_results([(ack_id, b"1")]),
                lambda: q.extend_lease_or_cancel(ack_id),
            ]
            for write in writes:
                with pytest.raises(sqliteq.StorageUnavailableError, match=re.escape(str(db_path))):
                    write()
            # Reads go on in WAL mode, and tell the truth.
            record = q.job_record("running")
            assert record is not None and record["state"] == "running"
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        assert q.job_record("queued") is not None
        assert q.acknowledge_with_results([(ack_id, b"1")]) == [True]


def test_ended_records_leave_the_file_after_keep_results_and_beyond_the_limit(
    db_path: Path, clock: FakeWallClock
) -> None:
    with sqliteq.new(db_path, clock=clock) as store:
        q = store.new_queue("work", keep_results=10, keep_results_limit=3)
        for i in range(5):
            assert q.enqueue_dedup(f"{i}".encode(), f"job-{i}")
        for _ in range(5):
            taken = q.dequeue_with_ack_id()
            assert taken is not None
            assert q.acknowledge_with_results([(taken[1], b"1")]) == [True]
        kept = "SELECT job_id FROM job_records ORDER BY job_id"
        assert rows(db_path, kept) == [("job-2",), ("job-3",), ("job-4",)]
        clock.advance(11)
        assert q.job_record("job-4") is None  # its time is up: not read any more
        assert q.enqueue_dedup(b"next", "job-5")  # an end prunes the expired rows
        taken = q.dequeue_with_ack_id()
        assert taken is not None and q.acknowledge(taken[1])
        assert rows(db_path, kept) == [("job-5",)]


def test_record_subscribers_of_one_file_hear_ends_from_another_store(db_path: Path) -> None:
    with sqliteq.new(db_path) as listening, sqliteq.new(db_path) as working:
        listener = listening.new_distributed_queue("work", keep_results=60)
        q = working.new_queue("work", keep_results=60)
        heard: list[str] = []
        got_all = threading.Event()

        def on_end(job_id: str) -> None:
            heard.append(job_id)
            if len(heard) == 3:
                got_all.set()

        listener.subscribe_records(on_end)
        for job_id in ("a", "b", "c"):
            assert q.enqueue_dedup(job_id.encode(), job_id)
        assert q.cancel("c")
        for _ in range(2):
            taken = q.dequeue_with_ack_id()
            assert taken is not None and q.acknowledge(taken[1])
        assert got_all.wait(10), heard
        assert sorted(heard) == ["a", "b", "c"]


def _plan(conn: sqlite3.Connection, sql: str) -> list[str]:
    params = {name: 1 for name in re.findall(r":(\w+)", sql)}  # every bound parameter, any value
    return [str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


def test_record_statements_use_their_indexes(db_path: Path, clock: FakeWallClock) -> None:
    with sqliteq.new(db_path, clock=clock) as store:
        q = store.new_queue("q", keep_results=60)
        for i in range(500):
            assert q.enqueue_dedup(b"x", f"job-{i}")
        for _ in range(250):
            taken = q.dequeue_with_ack_id()
            assert taken is not None and q.acknowledge(taken[1])
    conn = sqlite3.connect(db_path)
    try:
        conn.execute("ANALYZE")
        expected = {
            "READ_RECORD": [
                "SEARCH jobs USING INDEX jobs_dedup (queue=? AND job_id=?)",
                "SEARCH job_records USING PRIMARY KEY (queue=? AND job_id=?)",
            ],
            "TAKE_DEAD_RECORD": ["SEARCH job_records USING PRIMARY KEY (queue=? AND job_id=?)"],
            "ENDS_SINCE": [
                "SEARCH job_records USING COVERING INDEX job_records_ended"
                " (queue=? AND ended_seq>?)"
            ],
            "PRUNE_RECORDS_BY_AGE": [
                "SEARCH job_records USING PRIMARY KEY (queue=? AND job_id=?)",
                "SEARCH job_records USING COVERING INDEX job_records_ended (queue=?)",
                "SCAN (subquery-1)",  # the :scan oldest ends, read from the index above
            ],
            "PRUNE_RECORDS_OLDEST": [
                "SEARCH job_records USING COVERING INDEX job_records_ended"
                " (queue=? AND ended_seq<?)"
            ],
            "SWEEP_CANCELLED": ["SEARCH jobs USING INDEX jobs_cancel (queue=? AND lease_until<?)"],
        }
        for name, steps in expected.items():
            got = [s for s in _plan(conn, getattr(_sql, name)) if s.startswith(("SEARCH", "SCAN"))]
            assert got == steps, name
        dedup = _plan(conn, _sql.ENQUEUE_DEDUP)
        assert "SEARCH job_records USING PRIMARY KEY (queue=? AND job_id=?)" in dedup
        count = _plan(conn, _sql.COUNT_TAKEABLE)
        assert "SEARCH jobs USING COVERING INDEX jobs_line (queue=?)" in count
    finally:
        conn.close()


def test_a_record_whose_time_is_up_is_never_answered_before_a_prune_drops_it(
    db_path: Path, clock: FakeWallClock
) -> None:
    kept = "SELECT job_id FROM job_records ORDER BY job_id"
    with sqliteq.new(db_path, clock=clock) as store:
        q = store.new_queue("work", keep_results=0.5)

        def run(job_id: str) -> None:
            assert q.enqueue_dedup(job_id.encode(), job_id)
            taken = q.dequeue_with_ack_id()
            assert taken is not None
            assert q.acknowledge_with_results([(taken[1], b"1")]) == [True]

        run("a")
        clock.advance(0.6)
        run("b")  # within a second of the last prune by age: "a" stays in the file
        assert rows(db_path, kept) == [("a",), ("b",)]
        assert q.job_record("a") is None  # but its time is up: it is not read
        assert q.enqueue_dedup(b"again", "a")  # and its id is free
        record = q.job_record("a")
        assert record is not None and record["state"] == "queued"
        taken = q.dequeue_with_ack_id()
        assert taken is not None and taken[0] == b"again"
        assert q.acknowledge_with_results([(taken[1], b"2")]) == [True]  # replaces the old row
        record = q.job_record("a")
        assert record is not None and (record["state"], record["result"]) == ("succeeded", b"2")
        clock.advance(0.5)
        run("c")  # a second after the last prune by age: the records past their time go
        assert rows(db_path, kept) == [("c",)]
