"""sqliteq: delays, nacks, dead letters and stats on the file itself, with the clock replaced.

The shared semantics are checked by the conformance suite (``test_sqliteq_conformance.py``);
this module checks what only a file has: delays across reopening, the version 2 to 3
migration, ties at one millisecond, the operator calls on ``Queues``, and the query plans that
keep ``stats()`` cheap.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import sqliteq
from sqliteq import _schema, _sql
from tests.adapters.sqliteq.conftest import rows
from varmq.contract.protocols import (
    IDistributedPriorityQueue,
    IDistributedQueue,
)
from varmq.testing import FakeWallClock

APPLICATION_ID = 0x766D7173


def take(q: Any) -> tuple[bytes, str]:
    taken = q.dequeue_with_ack_id()
    assert taken is not None, "expected a job to take"
    return taken[0], taken[1]


# --- delays across reopening ---------------------------------------------------------------------


def test_delays_survive_closing_and_reopening_the_file(db_path: Path, clock: FakeWallClock) -> None:
    with sqliteq.new(db_path, clock=clock) as queues:
        q = queues.new_priority_queue("work", visibility_timeout=1000)
        assert q.enqueue_delayed(b"delayed", 60, "job-1", 1)
        assert q.enqueue(b"waiting", 5)
        assert q.dequeue_with_ack_id() is not None  # "waiting" leased, never acknowledged
        assert q.enqueue(b"nacked", 1)
        _, ack_id = take(q)
        assert q.nack(ack_id, 30)
    clock.advance(29)
    with sqliteq.new(db_path, clock=clock) as queues:
        q = queues.new_priority_queue("work", visibility_timeout=1000)
        assert q.dequeue_with_ack_id() is None
        assert q.stats()["delayed"] == 2
        assert q.enqueue_delayed(b"duplicate", 0, "job-1", 1) is True  # job-1 still stored
        clock.advance(2)
        assert take(q)[0] == b"nacked"
        assert q.dequeue_with_ack_id() is None
        clock.advance(30)
        assert take(q)[0] == b"delayed"
        assert q.dequeue_with_ack_id() is None


# --- order at one clock reading ------------------------------------------------------------------


def test_nacked_job_goes_behind_jobs_waiting_at_the_same_millisecond(
    queues: sqliteq.Queues,
) -> None:
    q = queues.new_queue("q")
    for item in (b"a", b"b", b"c"):
        assert q.enqueue(item)
    _, ack_id = take(q)
    assert q.nack(ack_id, 0)  # the clock did not move: a, b and c share one available_at
    assert q.values() == [b"b", b"c", b"a"]


def test_requeued_dead_letter_goes_behind_jobs_waiting_at_the_same_millisecond(
    queues: sqliteq.Queues,
) -> None:
    q = queues.new_priority_queue("q")
    assert q.enqueue(b"dead", 1)
    _, ack_id = take(q)
    assert q.dead_letter(ack_id, "boom")
    assert q.enqueue(b"waiting", 1) and q.enqueue(b"urgent", 0)
    assert q.requeue_dead() == 1
    assert q.values() == [b"urgent", b"waiting", b"dead"]


def test_due_delayed_job_keeps_the_place_it_was_given_when_delayed(
    queues: sqliteq.Queues, clock: FakeWallClock
) -> None:
    # A job due at t and a job enqueued at exactly t: the delayed one was sequenced first.
    q = queues.new_queue("q")
    assert q.enqueue_delayed(b"delayed", 1.0)
    clock.advance(1.0)
    assert q.enqueue(b"enqueued-at-due-time")
    assert q.values() == [b"delayed", b"enqueued-at-due-time"]
    assert [take(q)[0], take(q)[0]] == [b"delayed", b"enqueued-at-due-time"]


def test_an_expired_lease_keeps_its_place_ahead_of_later_jobs(
    queues: sqliteq.Queues, clock: FakeWallClock
) -> None:
    q = queues.new_queue("q", visibility_timeout=1)
    assert q.enqueue(b"first")
    take(q)
    clock.advance(0.5)
    assert q.enqueue(b"second")
    clock.advance(1)
    assert q.values() == [b"first", b"second"]


def test_a_delay_is_rounded_up_to_whole_milliseconds(
    queues: sqliteq.Queues, clock: FakeWallClock
) -> None:
    q = queues.new_queue("q")
    assert q.enqueue_delayed(b"x", 0.0001)
    assert q.dequeue_with_ack_id() is None
    clock.advance(0.001)
    assert take(q)[0] == b"x"


def test_bad_delays_are_refused_naming_the_queue(queues: sqliteq.Queues) -> None:
    q = queues.new_queue("emails")
    for bad, error in (("1", TypeError), (True, TypeError), (float("nan"), ValueError)):
        with pytest.raises(error, match=r"'emails'.*delay"):
            q.enqueue_delayed(b"x", bad)
    assert q.enqueue(b"x")
    _, ack_id = take(q)
    for bad in (float("inf"), 1e300):
        with pytest.raises(ValueError, match=r"'emails'.*delay"):
            q.nack(ack_id, bad)
    assert q.nack(ack_id, 3_153_600_000) is True  # the longest delay: 100 years
    assert q.stats()["delayed"] == 1


def test_a_delayed_enqueue_wakes_no_subscriber_but_a_requeue_does(
    queues: sqliteq.Queues, db_path: Path
) -> None:
    q = queues.new_distributed_queue("q")

    def enqueued() -> int:
        return int(rows(db_path, "SELECT enqueued FROM queues WHERE name = 'q'")[0][0])

    assert q.enqueue_delayed(b"later", 10)
    assert enqueued() == 0
    assert q.enqueue(b"now")
    _, ack_id = take(q)
    assert q.dead_letter(ack_id, "boom")
    assert enqueued() == 1
    assert q.requeue_dead() == 1
    assert enqueued() == 2


# --- dead letters --------------------------------------------------------------------------------


def test_dead_letter_keeps_priority_and_job_id_for_the_requeue(
    queues: sqliteq.Queues, db_path: Path
) -> None:
    q = queues.new_priority_queue("q")
    assert q.enqueue_dedup(b"job", "job-1", 7)
    _, ack_id = take(q)
    assert q.dead_letter(ack_id, "boom")
    assert rows(db_path, "SELECT queue, priority, job_id, attempts FROM dead_letters") == [
        ("q", 7, "job-1", 1)
    ]
    assert q.requeue_dead() == 1
    assert rows(db_path, "SELECT priority, job_id, attempts, state FROM jobs") == [
        (7, "job-1", 0, "ready")
    ]
    assert q.enqueue_dedup(b"again", "job-1", 7) is True
    assert q.values() == [b"job"]


def test_requeued_dead_letter_gives_up_its_job_id_when_another_job_holds_it(
    queues: sqliteq.Queues,
) -> None:
    q = queues.new_queue("q")
    for _ in range(2):
        assert q.enqueue_dedup(b"job", "job-1")
        _, ack_id = take(q)
        assert q.dead_letter(ack_id, "boom")
    assert q.enqueue_dedup(b"live", "job-1")
    assert q.requeue_dead() == 2
    assert q.values() == [b"live", b"job", b"job"]


def test_dead_letter_keys_are_never_reused_and_belong_to_their_queue(
    queues: sqliteq.Queues,
) -> None:
    q, other = queues.new_queue("q"), queues.new_queue("other")
    assert q.enqueue(b"a")
    assert q.dead_letter(take(q)[1], "boom")
    [old] = q.dead_letters()
    assert other.requeue_dead([old["key"]]) == 0
    assert q.requeue_dead([old["key"]]) == 1
    assert q.dead_letter(take(q)[1], "boom again")
    [new] = q.dead_letters()
    assert new["key"] != old["key"]
    assert q.requeue_dead([old["key"], "not-a-key", "9" * 40]) == 0
    with pytest.raises(TypeError, match="'q'"):
        q.requeue_dead(new["key"])


def test_dead_letter_counter_matches_the_rows_after_every_kind_of_change(
    queues: sqliteq.Queues, db_path: Path, clock: FakeWallClock
) -> None:
    q = queues.new_queue("q", dead_letter_limit=3, dead_letter_max_age=10)

    def kill(n: int) -> None:
        for i in range(n):
            assert q.enqueue(f"job-{i}")
            assert q.dead_letter(take(q)[1], "boom")

    def assert_counter_exact() -> None:
        counted = rows(db_path, "SELECT count(*) FROM dead_letters WHERE queue = 'q'")
        assert rows(db_path, "SELECT dead FROM queues WHERE name = 'q'") == counted
        assert q.stats()["dead"] == counted[0][0]

    steps = [
        lambda: kill(2),
        lambda: kill(3),  # the count bound drops two
        lambda: clock.advance(11),
        lambda: kill(1),  # the age bound drops the three old ones
        lambda: q.requeue_dead([q.dead_letters()[0]["key"]]),
        lambda: kill(2),
        lambda: q.purge_dead(),
    ]
    for step in steps:
        step()
        assert_counter_exact()


def test_bad_dead_letter_options_are_refused_naming_the_queue(queues: sqliteq.Queues) -> None:
    for options in (
        {"dead_letter_limit": 0},
        {"dead_letter_limit": -1},
        {"dead_letter_max_age": 0},
        {"dead_letter_max_age": float("inf")},
    ):
        with pytest.raises(ValueError, match=r"'emails'.*dead_letter"):
            queues.new_queue("emails", **options)
    with pytest.raises(ValueError, match=r"'emails'.*limit"):
        queues.new_queue("emails").dead_letters(limit=-1)


# --- list_queues and open_queue ------------------------------------------------------------------


def test_list_queues_gives_every_queue_created_in_the_file_with_its_kind(
    db_path: Path, clock: FakeWallClock
) -> None:
    with sqliteq.new(db_path, clock=clock) as queues:
        queues.new_queue("emails")
        queues.new_distributed_priority_queue("urgent")
        queues.new_queue("it's")
    with sqliteq.new(db_path, clock=clock) as queues:
        assert queues.list_queues() == [
            ("emails", "fifo"),
            ("it's", "fifo"),
            ("urgent", "priority"),
        ]


def test_open_queue_opens_an_existing_queue_as_its_own_distributed_kind(
    queues: sqliteq.Queues,
) -> None:
    queues.new_queue("emails").enqueue(b"mail")
    queues.new_priority_queue("urgent").enqueue(b"fire", 1)
    emails = queues.open_queue("emails", visibility_timeout=5)  # its own lease, stored limits
    urgent = queues.open_queue("urgent")
    assert isinstance(emails, sqliteq.DistributedQueue) and isinstance(emails, IDistributedQueue)
    assert isinstance(urgent, sqliteq.DistributedPriorityQueue)
    assert isinstance(urgent, IDistributedPriorityQueue)
    assert emails.lease_seconds == 5
    assert emails.values() == [b"mail"] and urgent.values() == [b"fire"]


def test_open_queue_of_a_missing_name_raises_a_lookup_error_naming_it(
    queues: sqliteq.Queues,
) -> None:
    queues.new_queue("emails")
    with pytest.raises(LookupError, match=r"no queue named 'email' in .*jobs\.db") as caught:
        queues.open_queue("email")
    assert isinstance(caught.value, sqliteq.QueueNotFoundError)
    assert queues.list_queues() == [("emails", "fifo")]  # nothing was created


def test_operator_calls_on_a_closed_file_raise(queues: sqliteq.Queues) -> None:
    queues.new_queue("emails")
    queues.close()
    with pytest.raises(sqliteq.ClosedError):
        queues.list_queues()
    with pytest.raises(sqliteq.ClosedError):
        queues.open_queue("emails")


# --- stats ---------------------------------------------------------------------------------------


def plan(conn: sqlite3.Connection, sql: str) -> list[str]:
    params = {"queue": "q", "now": 1_700_000_000_000, "lease_now": 1_000_000}
    return [str(row[3]) for row in conn.execute("EXPLAIN QUERY PLAN " + sql, params)]


def test_stats_of_many_jobs_read_indexes_only(
    queues: sqliteq.Queues, db_path: Path, clock: FakeWallClock
) -> None:
    q = queues.new_queue("q", visibility_timeout=10)
    other = queues.new_queue("other")
    for i in range(3000):
        assert q.enqueue(f"job-{i}")
        assert other.enqueue(f"job-{i}")
    for _ in range(100):
        assert q.enqueue_delayed(b"later", 60)
    leased = q.dequeue_batch_with_ack_ids(50)
    for _, ack_id in leased[:10]:
        assert q.dead_letter(ack_id, "boom")
    clock.advance(1)
    assert q.stats() == {
        "waiting": 2950,
        "in_flight": 40,
        "delayed": 100,
        "dead": 10,
        "oldest_age": 1.0,
    }
    conn = sqlite3.connect(db_path)
    try:
        conn.execute("ANALYZE")  # the plan must not change once the planner knows the sizes
        steps = plan(conn, _sql.STATS)
    finally:
        conn.close()
    tables = [step for step in steps if step.startswith(("SEARCH", "SCAN"))]
    # Every table is searched through an index; only the one-row derived tables are scanned.
    assert [step for step in tables if step.startswith("SEARCH")] == [
        "SEARCH jobs USING COVERING INDEX jobs_line (queue=?)",
        "SEARCH jobs USING COVERING INDEX jobs_delayed (queue=?)",
        "SEARCH queues USING INDEX sqlite_autoindex_queues_1 (name=?)",
    ]
    assert sorted(step for step in tables if step.startswith("SCAN")) == [
        "SCAN delayed",
        "SCAN line",
    ]


def test_statements_of_takes_and_dead_letters_use_their_indexes(db_path: Path) -> None:
    sqliteq.new(db_path).close()
    expected = {
        "PROMOTE_DUE": "jobs_delayed",
        "CLAIM": "jobs_line",
        "COUNT_TAKEABLE": "jobs_line",
        "NACK": "jobs_lease",
        "DEAD_LETTER": "jobs_lease",
        "LIST_DEAD": "dead_letters_age",
        "PRUNE_DEAD_BY_AGE": "dead_letters_age",
        "PRUNE_DEAD_OLDEST": "dead_letters_age",
        "DELETE_DEAD_ALL": "dead_letters_age",
        "REQUEUE_DEAD": "jobs_dedup",
    }
    conn = sqlite3.connect(db_path)
    try:
        for name, index in expected.items():
            params = dict.fromkeys(
                (
                    "queue",
                    "now",
                    "lease_now",
                    "lease_ms",
                    "n",
                    "token",
                    "delay_ms",
                    "cutoff",
                    "excess",
                ),
                1,
            )
            params |= dict.fromkeys(("limit", "key", "priority", "data", "job_id", "keep_ms"), 1)
            steps = [
                str(row[3])
                for row in conn.execute("EXPLAIN QUERY PLAN " + getattr(_sql, name), params)
            ]
            assert any(index in step for step in steps), (name, steps)
            assert not any(step.startswith(("SCAN jobs", "SCAN dead_letters")) for step in steps)
    finally:
        conn.close()


# --- migration from version 2 --------------------------------------------------------------------


def make_version_2_file(path: Path, *, capacity: bool) -> None:
    """A file as sqliteq version 2 wrote it: jobs ready, leased and done, maybe a capacity."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    for statements in _schema.MIGRATIONS[:2]:
        for statement in statements:
            conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 2")
    if capacity:
        for statement in _schema.INSTALL_CAPACITY:
            conn.execute(statement)
    conn.execute("INSERT INTO queues (name, kind) VALUES ('a', 'fifo'), ('b', 'priority')")
    jobs = [
        ("a", 0, b"a-1", "ready", None, "job-1"),
        ("a", 0, b"a-2", "ready", None, None),
        ("a", 0, b"a-leased", "leased", 4_000_000_000_000, None),
        ("a", 0, b"a-done", "done", None, None),
        ("b", 5, b"b-low", "ready", None, None),
        ("b", 1, b"b-expired", "leased", 1, None),
    ]
    for queue, priority, data, state, lease_until, job_id in jobs:
        conn.execute(
            "INSERT INTO jobs (queue, priority, data, job_id, state, lease_token, lease_until,"
            " attempts, enqueued_at, available_at) VALUES (?, ?, ?, ?, ?, ?, ?, 1, 0, 0)",
            (queue, priority, data, job_id, state, lease_until and f"t{lease_until}", lease_until),
        )
    conn.close()


@pytest.mark.parametrize("capacity", [False, True], ids=["plain", "with-capacity"])
def test_a_version_2_file_is_migrated_keeping_its_jobs_in_order(
    tmp_path: Path, clock: FakeWallClock, capacity: bool
) -> None:
    path = tmp_path / "jobs.db"
    make_version_2_file(path, capacity=capacity)
    with sqliteq.new(path, clock=clock) as queues:
        assert rows(path, "PRAGMA user_version") == [(_schema.SCHEMA_VERSION,)] == [(7,)]
        assert queues.list_queues() == [("a", "fifo"), ("b", "priority")]
        a, b = queues.open_queue("a"), queues.open_queue("b")
        assert a.values() == [b"a-1", b"a-2"]
        assert b.values() == [b"b-expired", b"b-low"]
        assert a.enqueue_dedup(b"dup", "job-1") and a.values() == [b"a-1", b"a-2"]
        assert a.stats()["in_flight"] == 1
        triggers = rows(path, "SELECT name FROM sqlite_master WHERE type = 'trigger'")
        assert len(triggers) == (3 if capacity else 0)
        if capacity:
            assert rows(path, "SELECT name, ready FROM queues ORDER BY name") == [
                ("a", 2),
                ("b", 1),
            ]
        assert a.enqueue_delayed(b"later", 1)
        data, ack_id = take(a)
        assert data == b"a-1" and a.nack(ack_id, 0)
        assert a.values() == [b"a-2", b"a-1"]
        assert a.dead_letter(take(a)[1], "boom")
        assert [letter["item"] for letter in a.dead_letters()] == [b"a-2"]
    with sqliteq.new(path, clock=clock) as queues:  # opens again without migrating twice
        assert queues.open_queue("a").stats()["dead"] == 1
