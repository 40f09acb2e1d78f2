"""sqliteq: queue semantics on one file, with the adapter's clock replaced (no sleeps).

Files, reopening and bad input are in ``test_sqliteq_files.py``; threads, processes and
notifications in ``test_sqliteq_concurrency.py``; the shared suite in
``test_sqliteq_conformance.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import sqliteq
from tests.adapters.sqliteq.conftest import rows
from varmq.testing import FakeWallClock

# --- capacity ----------------------------------------------------------------------------------


def test_capacity_counts_waiting_jobs_not_leased_ones(queues: sqliteq.Queues) -> None:
    q = queues.new_priority_queue("emails")
    q.set_capacity(2)
    assert q.enqueue(b"a", 0) and q.enqueue(b"b", 0)
    assert q.enqueue(b"c", -1) is False
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    assert q.enqueue(b"c", 0)
    assert q.enqueue(b"d", 0) is False
    assert q.acknowledge(taken[1])
    assert q.enqueue(b"d", 0) is False
    assert q.values() == [b"b", b"c"]


def test_capacity_counts_a_job_whose_lease_expired_as_waiting(
    queues: sqliteq.Queues, clock: FakeWallClock
) -> None:
    q = queues.new_queue("emails", visibility_timeout=10)
    q.set_capacity(2)
    assert q.enqueue(b"a") and q.enqueue(b"b")
    assert q.dequeue_with_ack_id() is not None
    assert q.enqueue(b"c")
    clock.advance(11)
    assert len(q) == 3
    assert q.enqueue(b"d") is False


def test_capacity_is_set_per_queue_object_and_counts_jobs_from_every_object(
    queues: sqliteq.Queues, db_path: Path, clock: FakeWallClock
) -> None:
    limited = queues.new_queue("emails")
    limited.set_capacity(2)
    with sqliteq.new(db_path, clock=clock) as other_process:
        unlimited = other_process.new_queue("emails")
        assert unlimited.enqueue(b"a") and unlimited.enqueue(b"b")
        assert limited.enqueue(b"c") is False
        assert unlimited.enqueue(b"c")
    assert queues.new_queue("other").enqueue(b"x")
    assert len(limited) == 3


def test_full_queue_still_accepts_a_dedup_of_a_stored_job_id_but_not_a_new_one(
    queues: sqliteq.Queues,
) -> None:
    q = queues.new_queue("emails")
    q.set_capacity(1)
    assert q.enqueue_dedup(b"first", "job-1")
    assert q.enqueue_dedup(b"again", "job-1") is True
    assert q.enqueue_dedup(b"second", "job-2") is False
    assert q.values() == [b"first"]


def test_ready_counter_matches_the_ready_rows_after_every_kind_of_change(
    queues: sqliteq.Queues, db_path: Path, clock: FakeWallClock
) -> None:
    def assert_counter_exact() -> None:
        counted = rows(db_path, "SELECT count(*) FROM jobs WHERE queue = 'q' AND state = 'ready'")
        assert rows(db_path, "SELECT ready FROM queues WHERE name = 'q'") == counted

    q = queues.new_queue("q", visibility_timeout=10, remove_on_complete=False, completed_limit=2)
    steps = [
        lambda: [q.enqueue(f"before-{i}") for i in range(4)],
        lambda: q.set_capacity(1000),  # installs the counter, counting the jobs already there
        lambda: [q.enqueue(f"job-{i}") for i in range(10)],
        lambda: q.enqueue_dedup(b"d", "job-d") and q.enqueue_dedup(b"d", "job-d"),
        lambda: q.acknowledge_many([ack for _, ack in q.dequeue_batch_with_ack_ids(3)]),
        lambda: q.dequeue_with_ack_id(),
        lambda: clock.advance(11),
        lambda: q.dequeue_batch_with_ack_ids(2),
        lambda: q.dequeue(),
        lambda: q.purge(),
        lambda: q.enqueue(b"after purge"),
    ]
    for step in steps[:2]:
        step()
    assert_counter_exact()
    for step in steps[2:]:
        step()
        assert_counter_exact()


def test_a_file_pays_for_capacity_bookkeeping_only_once_a_capacity_was_set(
    queues: sqliteq.Queues, db_path: Path
) -> None:
    bookkeeping = (
        "SELECT name FROM sqlite_master WHERE name LIKE 'jobs_ready_%' OR name = 'jobs_expiry'"
    )
    q = queues.new_queue("q")
    q.set_capacity(0)
    assert rows(db_path, bookkeeping) == []
    q.set_capacity(5)
    assert len(rows(db_path, bookkeeping)) == 4
    q.set_capacity(0)
    assert len(rows(db_path, bookkeeping)) == 4


def test_capacity_zero_is_unlimited_and_bad_capacities_are_refused_naming_the_queue(
    queues: sqliteq.Queues,
) -> None:
    q = queues.new_queue("emails")
    q.set_capacity(1)
    q.set_capacity(0)
    assert all(q.enqueue(f"job-{i}") for i in range(5))
    with pytest.raises(ValueError, match=r"'emails'.*capacity=-1"):
        q.set_capacity(-1)
    for bad in (1.5, True, "3"):
        with pytest.raises(TypeError, match=r"'emails'.*capacity"):
            q.set_capacity(bad)  # type: ignore[arg-type]


# --- order ---------------------------------------------------------------------------------------


def test_fifo_queue_hands_jobs_out_in_enqueue_order(queues: sqliteq.Queues) -> None:
    q = queues.new_queue("emails")
    for i in range(20):
        assert q.enqueue(f"job-{i}".encode())
    assert [q.dequeue() for _ in range(20)] == [f"job-{i}".encode() for i in range(20)]
    assert q.dequeue() is None


def test_priority_queue_orders_by_priority_then_fifo_including_negative_priorities(
    queues: sqliteq.Queues,
) -> None:
    q = queues.new_priority_queue("urgent")
    for item, priority in [("a", 10), ("b", 0), ("c", -5), ("d", 0), ("e", 10), ("f", -5)]:
        assert q.enqueue(item, priority)
    assert q.values() == [b"c", b"f", b"b", b"d", b"a", b"e"]
    taken = [q.dequeue_with_ack_id() for _ in range(6)]
    assert [t[0] for t in taken if t] == [b"c", b"f", b"b", b"d", b"a", b"e"]


def test_identical_payloads_stay_distinct_jobs(queues: sqliteq.Queues) -> None:
    q = queues.new_priority_queue("same")
    assert q.enqueue(b"x", 1) and q.enqueue(b"x", 1) and q.enqueue(b"x", 1)
    assert len(q) == 3
    taken = q.dequeue_batch_with_ack_ids(5)
    assert [data for data, _ in taken] == [b"x", b"x", b"x"]
    assert len({ack for _, ack in taken}) == 3


def test_str_items_are_stored_as_utf8_bytes_and_other_types_are_refused(
    queues: sqliteq.Queues,
) -> None:
    q = queues.new_queue("types")
    assert q.enqueue("héllo ✓")
    assert q.enqueue(bytearray(b"ba"))
    for bad in (123, None, {"a": 1}):
        with pytest.raises(TypeError, match=r"'types'.*expected bytes or str"):
            q.enqueue(bad)
    assert q.values() == ["héllo ✓".encode(), b"ba"]


# --- leases and acknowledgement ----------------------------------------------------------------


def test_acknowledge_removes_the_job(queues: sqliteq.Queues, db_path: Path) -> None:
    q = queues.new_queue("acks")
    q.enqueue(b"a")
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    assert len(q) == 0 and q.values() == []
    assert q.acknowledge(taken[1]) is True
    assert rows(db_path, "SELECT count(*) FROM jobs") == [(0,)]


def test_unknown_and_repeated_ack_ids_are_refused(queues: sqliteq.Queues) -> None:
    q = queues.new_queue("acks")
    q.enqueue(b"a")
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    assert q.acknowledge("no-such-ack-id") is False
    assert q.acknowledge(taken[1]) is True
    assert q.acknowledge(taken[1]) is False
    assert q.extend_lease(taken[1]) is False


def test_ack_id_of_another_queue_is_refused(queues: sqliteq.Queues) -> None:
    a, b = queues.new_queue("a"), queues.new_queue("b")
    a.enqueue(b"x")
    taken = a.dequeue_with_ack_id()
    assert taken is not None
    assert b.acknowledge(taken[1]) is False
    assert a.acknowledge(taken[1]) is True


def test_expired_lease_makes_the_job_available_again_with_its_priority_and_place(
    queues: sqliteq.Queues, clock: FakeWallClock
) -> None:
    q = queues.new_priority_queue("leases", visibility_timeout=10)
    q.enqueue(b"first", 3)
    q.enqueue(b"second", 3)
    first = q.dequeue_batch_with_attempts(1)[0]
    q.enqueue(b"third", 3)
    clock.advance(9.999)
    assert q.values() == [b"second", b"third"]
    clock.advance(0.001)
    assert len(q) == 3
    assert q.values() == [b"first", b"second", b"third"]
    again = q.dequeue_batch_with_attempts(1)[0]
    assert again[0] == b"first"
    assert again[1] != first[1]
    assert (first[2], again[2]) == (1, 2)
    assert q.acknowledge(first[1]) is False  # fenced: the stale ack id is refused
    assert q.extend_lease(first[1]) is False
    assert q.acknowledge(again[1]) is True


def test_expired_ack_id_is_refused_even_before_another_take(
    queues: sqliteq.Queues, clock: FakeWallClock
) -> None:
    q = queues.new_queue("leases", visibility_timeout=5)
    q.enqueue(b"a")
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    clock.advance(5)
    assert q.acknowledge(taken[1]) is False
    assert q.values() == [b"a"]


def test_extend_lease_keeps_a_job_leased_past_the_original_deadline(
    queues: sqliteq.Queues, clock: FakeWallClock
) -> None:
    q = queues.new_queue("leases", visibility_timeout=10)
    assert q.lease_seconds == 10
    q.enqueue(b"a")
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    clock.advance(8)
    assert q.extend_lease(taken[1]) is True
    clock.advance(8)  # 16 s after the take, 8 s after the extension
    assert len(q) == 0 and q.dequeue_with_ack_id() is None
    assert q.acknowledge(taken[1]) is True


def test_batch_take_returns_at_most_n_jobs_each_with_its_own_ack_id(
    queues: sqliteq.Queues,
) -> None:
    q = queues.new_queue("batch")
    for i in range(5):
        q.enqueue(f"{i}")
    first = q.dequeue_batch_with_ack_ids(3)
    assert [data for data, _ in first] == [b"0", b"1", b"2"]
    rest = q.dequeue_batch_with_attempts(10)
    assert [(data, attempts) for data, _, attempts in rest] == [(b"3", 1), (b"4", 1)]
    acks = [ack for _, ack in first] + [ack for _, ack, _ in rest]
    assert len(set(acks)) == 5
    assert q.dequeue_batch_with_ack_ids(0) == [] and q.dequeue_batch_with_ack_ids(3) == []
    assert q.acknowledge_many([*acks[:2], "unknown", acks[0], *acks[2:]]) == [
        True,
        True,
        False,
        False,
        True,
        True,
        True,
    ]


# --- dedup -------------------------------------------------------------------------------------


def test_dedup_stores_a_job_id_once_while_it_is_waiting_or_leased(
    queues: sqliteq.Queues,
) -> None:
    q = queues.new_priority_queue("dedup")
    assert q.enqueue_dedup(b"one", "job-1", 5)
    assert q.enqueue_dedup(b"two", "job-1", 0)  # True: the job is there
    assert q.values() == [b"one"]
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    assert q.enqueue_dedup(b"three", "job-1")
    assert q.values() == []
    assert q.acknowledge(taken[1])
    assert q.enqueue_dedup(b"four", "job-1")
    assert q.values() == [b"four"]


def test_dedup_is_per_queue(queues: sqliteq.Queues) -> None:
    a, b = queues.new_queue("a"), queues.new_queue("b")
    assert a.enqueue_dedup(b"x", "same-id") and b.enqueue_dedup(b"y", "same-id")
    assert a.values() == [b"x"] and b.values() == [b"y"]


def test_dedup_allows_a_job_id_again_once_it_completed_and_was_kept(
    queues: sqliteq.Queues,
) -> None:
    q = queues.new_queue("kept", remove_on_complete=False)
    q.enqueue_dedup(b"x", "id")
    taken = q.dequeue_with_ack_id()
    assert taken is not None and q.acknowledge(taken[1])
    assert q.enqueue_dedup(b"y", "id")
    assert q.values() == [b"y"]


# --- len, values, purge, close ------------------------------------------------------------------


def test_purge_removes_waiting_jobs_but_leased_ones_can_still_be_acknowledged(
    queues: sqliteq.Queues,
) -> None:
    q = queues.new_queue("purge")
    for item in (b"a", b"b", b"c"):
        q.enqueue(item)
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    q.purge()
    assert len(q) == 0 and q.values() == [] and q.dequeue() is None
    assert q.acknowledge(taken[1]) is True


def test_closed_queue_refuses_enqueues_and_takes_but_still_takes_acks(
    queues: sqliteq.Queues,
) -> None:
    q = queues.new_queue("closing")
    for item in (b"a", b"b", b"c"):
        q.enqueue(item)
    taken = q.dequeue_with_ack_id()
    other = q.dequeue_with_ack_id()
    assert taken is not None and other is not None
    q.close()
    assert q.enqueue(b"d") is False and q.enqueue_dedup(b"e", "e") is False
    assert len(q) == 0  # no busy loop: nothing to count that a take would not give
    assert q.values() == []
    assert q.dequeue() is None and q.dequeue_with_ack_id() is None
    assert q.dequeue_batch_with_ack_ids(5) == [] and q.dequeue_batch_with_attempts(5) == []
    assert q.extend_lease(taken[1]) is True
    assert q.acknowledge(taken[1]) is True
    assert q.acknowledge_many([other[1]]) == [True]
    reopened = queues.new_queue("closing")
    assert reopened.values() == [b"c"]


def test_closing_queues_closes_every_queue_without_raising(db_path: Path) -> None:
    opened = sqliteq.new(db_path)
    q = opened.new_priority_queue("p")
    q.enqueue(b"a", 1)
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    opened.close()
    opened.close()  # idempotent
    assert q.enqueue(b"b", 1) is False
    assert len(q) == 0 and q.values() == [] and q.dequeue_with_ack_id() is None
    assert q.acknowledge(taken[1]) is False
    with pytest.raises(sqliteq.ClosedError, match=r"jobs\.db is closed"):
        opened.new_queue("q")


def test_len_counts_only_jobs_a_take_would_get(
    queues: sqliteq.Queues, clock: FakeWallClock
) -> None:
    q = queues.new_queue("len", visibility_timeout=1)
    for item in (b"a", b"b"):
        q.enqueue(item)
    assert len(q) == 2
    q.dequeue_with_ack_id()
    assert len(q) == 1
    clock.advance(1)
    assert len(q) == 2


def test_dequeue_without_lease_removes_the_job(queues: sqliteq.Queues, db_path: Path) -> None:
    q = queues.new_queue("plain")
    q.enqueue(b"a")
    assert q.dequeue() == b"a"
    assert rows(db_path, "SELECT count(*) FROM jobs") == [(0,)]


# --- remove_on_complete=False -------------------------------------------------------------------


def test_completed_jobs_are_kept_up_to_the_retention_limit(
    queues: sqliteq.Queues, db_path: Path
) -> None:
    q = queues.new_queue("kept", remove_on_complete=False, completed_limit=5)
    for i in range(12):
        q.enqueue(f"{i}")
    for _ in range(12):
        taken = q.dequeue_with_ack_id()
        assert taken is not None and q.acknowledge(taken[1])
    kept = rows(db_path, "SELECT data FROM jobs WHERE state = 'done' ORDER BY id")
    assert [bytes(r[0]) for r in kept] == [b"7", b"8", b"9", b"10", b"11"]
    assert rows(db_path, "SELECT done FROM queues WHERE name = 'kept'") == [(5,)]
    assert len(q) == 0 and q.dequeue() is None


def test_completed_jobs_older_than_the_age_limit_are_dropped(
    queues: sqliteq.Queues, clock: FakeWallClock, db_path: Path
) -> None:
    q = queues.new_queue("kept", remove_on_complete=False, completed_max_age=60)
    for item in (b"old", b"new"):
        q.enqueue(item)
    assert q.dequeue() == b"old"
    clock.advance(61)
    taken = q.dequeue_with_ack_id()
    assert taken is not None and q.acknowledge(taken[1])
    kept = rows(db_path, "SELECT data, attempts FROM jobs WHERE state = 'done'")
    assert [(bytes(d), a) for d, a in kept] == [(b"new", 1)]
    assert rows(db_path, "SELECT done FROM queues WHERE name = 'kept'") == [(1,)]


def test_retention_of_one_queue_leaves_other_queues_alone(
    queues: sqliteq.Queues, db_path: Path
) -> None:
    a = queues.new_queue("a", remove_on_complete=False, completed_limit=1)
    b = queues.new_queue("b", remove_on_complete=False, completed_limit=10)
    for q in (a, b, a, b):
        q.enqueue(b"x")
    for q in (a, b, a, b):
        taken = q.dequeue_with_ack_id()
        assert taken is not None and q.acknowledge(taken[1])
    done = rows(db_path, "SELECT queue, count(*) FROM jobs WHERE state = 'done' GROUP BY queue")
    assert done == [("a", 1), ("b", 2)]
    assert rows(db_path, "SELECT name, done FROM queues ORDER BY name") == done


# --- options -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"visibility_timeout": 0},
        {"visibility_timeout": -1},
        {"visibility_timeout": float("inf")},
        {"completed_limit": -1},
        {"completed_max_age": 0},
    ],
)
def test_bad_queue_options_are_refused_naming_the_queue(
    queues: sqliteq.Queues, options: dict[str, Any]
) -> None:
    with pytest.raises(ValueError, match="queue 'q'"):
        queues.new_queue("q", **options)


def test_durable_commits_with_synchronous_full_and_the_default_with_normal(
    db_path: Path,
) -> None:
    levels = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}
    for options, expected in (({}, "NORMAL"), ({"durable": True}, "FULL")):
        with sqliteq.new(db_path, **options) as store:  # type: ignore[arg-type]
            level = store._db._conn.execute("PRAGMA synchronous").fetchone()[0]
            assert levels[level] == expected
    with pytest.raises(ValueError, match="not both"):
        sqliteq.new(db_path, durable=True, synchronous="NORMAL")
    with pytest.raises(TypeError, match="durable"):
        sqliteq.new(db_path, durable="yes")  # type: ignore[arg-type]


def test_bad_database_options_are_refused(db_path: Path) -> None:
    with pytest.raises(ValueError, match="synchronous"):
        sqliteq.new(db_path, synchronous="SOMETIMES")
    with pytest.raises(ValueError, match="busy_timeout"):
        sqliteq.new(db_path, busy_timeout=-1)
    with pytest.raises(sqliteq.SqliteqError, match="not a file path"):
        sqliteq.new(":memory:")
    assert not db_path.exists()
