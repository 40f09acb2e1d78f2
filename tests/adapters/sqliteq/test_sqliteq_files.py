"""sqliteq: the file: reopening, queue names and kinds, and files that must be refused untouched."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import sqliteq
from sqliteq import _schema, _sql

APPLICATION_ID = 0x766D7173


def snapshot(directory: Path, *, shm: bool = True) -> dict[str, bytes]:
    """Every file in ``directory`` with its bytes: a refused open must change none of them.

    ``shm=False`` leaves out ``-shm`` files: while another connection has a WAL database open,
    any reader (ours included) records its read mark there; that index is not the database.
    """
    return {
        p.name: p.read_bytes()
        for p in sorted(directory.iterdir())
        if shm or not p.name.endswith("-shm")
    }


def make_sqliteq_file(path: Path, jobs: int) -> None:
    queues = sqliteq.new(path)
    q = queues.new_queue("q")
    for i in range(jobs):
        q.enqueue(f"job-{i:05d}-".encode() * 20)
    queues.close()


# --- reopening ---------------------------------------------------------------------------------


def test_fifo_queue_reopens_with_its_jobs_after_close(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    with sqliteq.new(path) as queues:
        q = queues.new_queue("emails")
        q.enqueue(b"a")
        q.enqueue(b"b")
    with sqliteq.new(path) as queues:
        assert queues.new_queue("emails").values() == [b"a", b"b"]


def test_priority_queue_reopens_with_its_jobs_after_close(tmp_path: Path) -> None:
    # Upstream sqliteq failed here: reopening a priority queue raised "duplicate column name".
    path = tmp_path / "jobs.db"
    with sqliteq.new(path) as queues:
        q = queues.new_priority_queue("urgent")
        q.enqueue(b"low", 9)
        q.enqueue(b"high", 1)
    for _ in range(2):
        with sqliteq.new(path) as queues:
            assert queues.new_priority_queue("urgent").values() == [b"high", b"low"]
            assert queues.new_distributed_priority_queue("urgent").values() == [b"high", b"low"]


def test_opening_a_queue_never_takes_back_jobs_leased_elsewhere(tmp_path: Path) -> None:
    # Upstream sqliteq requeued every in-flight row whenever any process opened the queue.
    path = tmp_path / "jobs.db"
    first = sqliteq.new(path)
    q = first.new_queue("work")
    q.enqueue(b"a")
    taken = q.dequeue_with_ack_id()
    assert taken is not None
    second = sqliteq.new(path)
    other = second.new_queue("work")
    assert len(other) == 0 and other.dequeue_with_ack_id() is None
    assert q.acknowledge(taken[1]) is True
    first.close()
    second.close()


def test_new_file_is_marked_as_ours_and_uses_wal(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    sqliteq.new(path).close()
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
        assert conn.execute("PRAGMA user_version").fetchone() == (_schema.SCHEMA_VERSION,) == (7,)
        assert conn.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        conn.close()


def test_empty_file_and_empty_sqlite_database_are_adopted(tmp_path: Path) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    blank = tmp_path / "blank.db"
    sqlite3.connect(blank).execute("PRAGMA user_version = 0").connection.close()
    for path in (empty, blank):
        with sqliteq.new(path) as queues:
            assert queues.new_queue("q").enqueue(b"x")


# --- schema versions ---------------------------------------------------------------------------


def make_version_1_file(path: Path) -> None:
    """A file as sqliteq wrote it before version 2: ready, leased and done jobs in two queues."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    for statement in sqliteq._schema.MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.execute("INSERT INTO queues (name, kind) VALUES ('a', 'fifo'), ('b', 'priority')")
    jobs = [("a", "ready", None)] * 3 + [("a", "leased", 4_000_000_000_000), ("a", "done", None)]
    jobs += [("b", "ready", None), ("b", "leased", 1)]
    for queue, state, lease_until in jobs:
        conn.execute(
            "INSERT INTO jobs (queue, data, state, lease_token, lease_until, enqueued_at, "
            "available_at) VALUES (?, x'00', ?, ?, ?, 0, 0)",
            (queue, state, None if lease_until is None else f"t{lease_until}", lease_until),
        )
    conn.close()


def test_a_version_1_file_is_migrated_and_counts_its_stored_jobs_towards_a_capacity(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    make_version_1_file(path)
    with sqliteq.new(path) as queues:
        a, b = queues.new_queue("a"), queues.new_priority_queue("b")
        a.set_capacity(4)
        conn = sqlite3.connect(path)
        try:
            assert (
                conn.execute("PRAGMA user_version").fetchone() == (_schema.SCHEMA_VERSION,) == (7,)
            )
            ready = dict(conn.execute("SELECT name, ready FROM queues").fetchall())
        finally:
            conn.close()
        assert ready == {"a": 3, "b": 1}
        assert a.enqueue(b"x") and a.enqueue(b"y") is False
        b.set_capacity(2)  # one ready job and one whose lease expired long ago
        assert b.enqueue(b"x", 0) is False
        assert len(a) == 4 and len(b) == 2


# --- queue names and kinds -----------------------------------------------------------------------


NAMES = ["plain", "with space", "it's", 'say "hi"', "'; DROP TABLE jobs; --", "名前 ✓", "\x00"]


def test_queue_names_are_any_text_and_stay_apart(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    with sqliteq.new(path) as queues:
        for name in NAMES:
            assert queues.new_queue(name).enqueue(name)
    with sqliteq.new(path) as queues:
        for name in NAMES:
            q = queues.new_queue(name)
            assert q.values() == [name.encode()]
            assert q.dequeue() == name.encode()


@pytest.mark.parametrize("name", ["emails", 'it\'s "quoted"', " "])
def test_opening_a_fifo_queue_as_a_priority_queue_raises_naming_both(
    tmp_path: Path, name: str
) -> None:
    with sqliteq.new(tmp_path / "jobs.db") as queues:
        queues.new_queue(name)
        with pytest.raises(sqliteq.QueueKindError, match="is a FIFO queue, not a priority") as e:
            queues.new_distributed_priority_queue(name)
        assert repr(name) in str(e.value) and "jobs.db" in str(e.value)


def test_opening_a_priority_queue_as_a_fifo_queue_raises(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    with sqliteq.new(path) as queues:
        queues.new_priority_queue("urgent")
    with (
        sqliteq.new(path) as queues,
        pytest.raises(
            sqliteq.QueueKindError, match=r"'urgent' .* is a priority queue.*new_priority_queue"
        ),
    ):
        queues.new_distributed_queue("urgent")


# --- files that are refused and left unchanged -------------------------------------------------


def assert_refused(
    path: Path, error: type[Exception], reason: str, *, in_use: bool = False
) -> None:
    before = snapshot(path.parent, shm=not in_use)
    with pytest.raises(error, match=reason) as caught:
        sqliteq.new(path)
    assert str(path) in str(caught.value) and "refusing to open it" in str(caught.value)
    # Byte for byte, and no -wal/-shm files left behind.
    assert snapshot(path.parent, shm=not in_use) == before


def test_a_file_that_is_not_sqlite_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"these are my notes, not a database\n" * 50)
    assert_refused(path, sqliteq.NotADatabaseError, "is not a SQLite database")


def test_a_short_file_that_is_not_sqlite_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "short.db"
    path.write_bytes(b"SQLite")
    assert_refused(path, sqliteq.NotADatabaseError, "is not a SQLite database")


def test_a_sqlite_database_of_another_application_is_refused_and_left_unchanged(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    conn.execute("INSERT INTO users (name) VALUES ('ada')")
    conn.commit()
    conn.close()
    assert_refused(path, sqliteq.ForeignDatabaseError, "another application .*users")


def test_a_database_with_a_foreign_application_id_is_refused_even_without_tables(
    tmp_path: Path,
) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA application_id = 1234")
    conn.close()
    assert_refused(path, sqliteq.ForeignDatabaseError, "application_id 0x4d2")


def test_a_foreign_database_in_wal_mode_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (1)")
    # Still open: the -wal file holds the data; refusing must not checkpoint it.
    try:
        assert_refused(path, sqliteq.ForeignDatabaseError, "another application", in_use=True)
        assert (tmp_path / "app.db-wal").stat().st_size > 0
    finally:
        conn.close()


def test_a_damaged_sqliteq_file_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    make_sqliteq_file(path, jobs=300)
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 4 * page
    data[2 * page : 3 * page] = b"\xa5" * page  # scribble over one page of the jobs table
    path.write_bytes(bytes(data))
    assert_refused(path, sqliteq.CorruptDatabaseError, "is damaged")


def test_a_truncated_sqliteq_file_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    make_sqliteq_file(path, jobs=300)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    assert_refused(path, sqliteq.CorruptDatabaseError, "is damaged")


def test_a_file_from_a_newer_sqliteq_is_refused_and_left_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    make_sqliteq_file(path, jobs=1)
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    assert_refused(path, sqliteq.SchemaVersionError, "schema version 99.*upgrade sqliteq")


def test_a_file_marked_ours_without_our_tables_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    conn.close()
    assert_refused(path, sqliteq.CorruptDatabaseError, "lacks its tables")


def test_a_directory_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "dir.db"
    path.mkdir()
    with pytest.raises(sqliteq.RefusedDatabaseError, match=r"dir\.db is not a regular file"):
        sqliteq.new(path)


def test_a_path_in_a_missing_directory_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "jobs.db"
    with pytest.raises(sqliteq.RefusedDatabaseError, match=r"missing/jobs\.db cannot be opened"):
        sqliteq.new(path)


# --- opening by URL, for operator tools ----------------------------------------------------------


def test_open_url_takes_a_path_and_every_sqlite_url_form(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_sqliteq_file(tmp_path / "jobs.db", 1)
    monkeypatch.chdir(tmp_path.parent)
    relative = f"{tmp_path.name}/jobs.db"
    absolute = str(tmp_path / "jobs.db")
    assert sqliteq.URL_SCHEMES == ("sqlite",)
    for url, path in [
        (absolute, absolute),
        (relative, relative),
        (f"sqlite:{relative}", relative),
        (f"sqlite://{relative}", relative),
        (f"sqlite://{absolute}", absolute),  # sqlite:///abs/path
    ]:
        with sqliteq.open_url(url) as queues:
            assert queues.location == queues.path == path
            assert queues.list_queues() == [("q", "fifo")]


def test_open_url_of_a_missing_file_raises_file_not_found_naming_it_and_creates_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    with pytest.raises(FileNotFoundError, match="no such database file") as caught:
        sqliteq.open_url(f"sqlite://{path}")
    assert caught.value.filename == str(path)
    assert list(tmp_path.iterdir()) == []
    with sqliteq.open_url(str(path), create=True) as queues:
        assert queues.new_queue("q").enqueue(b"x")


def test_open_url_refuses_an_empty_file_and_a_sqlite_database_without_tables_untouched(
    tmp_path: Path,
) -> None:
    empty = tmp_path / "empty.db"
    empty.touch()
    blank = tmp_path / "blank.db"
    sqlite3.connect(blank).execute("PRAGMA user_version = 0").connection.close()
    before = snapshot(tmp_path)
    for path, reason in [(empty, "is an empty file"), (blank, "without tables")]:
        with pytest.raises(sqliteq.NotADatabaseError, match=reason) as caught:
            sqliteq.open_url(str(path))
        assert caught.value.path == str(path) and "create=True" in str(caught.value)
    assert snapshot(tmp_path) == before
    with sqliteq.open_url(str(blank), create=True) as queues:
        assert queues.list_queues() == []


def test_open_url_refuses_another_scheme_naming_the_url(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"'redis://localhost/0'.*sqlite:"):
        sqliteq.open_url("redis://localhost/0")
    assert list(tmp_path.iterdir()) == []


# --- CHECK constraints rewritten in place ---------------------------------------------------------


def make_file_as_written(path: Path) -> None:
    """A current-version file as every sqliteq of schema version 6 created it until now: each
    migration's statements as written, a ready job in queue ``a``."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode = WAL")
    for statements in _schema.MIGRATIONS:
        for statement in statements:
            conn.execute(statement)
    conn.execute(_sql.SET_APPLICATION_ID.format(value=_schema.APPLICATION_ID))
    conn.execute(_sql.SET_USER_VERSION.format(value=_schema.SCHEMA_VERSION))
    conn.execute("INSERT INTO queues (name, kind) VALUES ('a', 'fifo')")
    conn.execute(
        "INSERT INTO jobs (queue, data, job_id, state, enqueued_at, available_at)"
        " VALUES ('a', x'31', 'kept-id', 'ready', 0, 0)"
    )
    conn.close()


def table_sql(path: Path) -> dict[str, str]:
    conn = sqlite3.connect(path)
    try:
        found = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
        return {name: sql for name, sql in found}
    finally:
        conn.close()


def test_a_write_open_replaces_the_state_checks_by_their_equivalents_and_keeps_the_jobs(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    make_file_as_written(path)
    for table, written, _ in _schema.CHECK_REWRITES:
        assert written in table_sql(path)[table]
    with sqliteq.new(path, read_only=True, create=False):
        pass  # a read-only open changes nothing
    assert all(written in table_sql(path)[t] for t, written, _ in _schema.CHECK_REWRITES)

    # A connection opened before the rewrite (as a process of the previous release holds one)
    # goes on writing through its prepared statements once the schema changed under it.
    other = sqlite3.connect(path, isolation_level=None)
    insert = (
        "INSERT INTO jobs (queue, data, state, enqueued_at, available_at)"
        " VALUES ('other', x'00', ?, 0, 0)"
    )
    other.execute(insert, ("ready",))
    with sqliteq.new(path) as queues:
        other.execute(insert, ("done",))
        with pytest.raises(sqlite3.IntegrityError, match="state = 'ready' OR"):
            other.execute(insert, ("lost",))
        other.close()
        q = queues.new_queue("a", keep_results=60)
        assert q.enqueue_dedup(b"2", "kept-id") is True  # still held by the stored job
        assert len(q) == 1
        assert q.enqueue_dedup(b"3", "job-3")
        taken = q.dequeue_batch_with_attempts(2)
        assert [data for data, _, _ in taken] == [b"1", b"3"]
        assert q.acknowledge_with_results([(ack_id, b"1") for _, ack_id, _ in taken])
        record = q.job_record("job-3")
        assert record is not None and record["state"] == "succeeded"

    tables = table_sql(path)
    for table, written, equivalent in _schema.CHECK_REWRITES:
        assert written not in tables[table] and equivalent in tables[table]
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        assert conn.execute("PRAGMA user_version").fetchone() == (_schema.SCHEMA_VERSION,)
        # The constraints still refuse what they refused.
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            conn.execute(
                "INSERT INTO jobs (queue, data, state, enqueued_at, available_at)"
                " VALUES ('a', x'00', 'lost', 0, 0)"
            )
        with pytest.raises(sqlite3.IntegrityError, match="CHECK constraint failed"):
            conn.execute(
                "INSERT INTO job_records (queue, job_id, state, keep_ms, enqueued_at,"
                " finished_at, expires_at, ended_seq) VALUES ('a', 'x', 'queued', 1, 0, 0, 1, 9)"
            )
    finally:
        conn.close()
    with sqliteq.new(path) as queues:  # the second open finds nothing to rewrite
        assert queues.new_queue("a").enqueue(b"4")
    assert table_sql(path) == tables


def test_a_file_whose_checks_cannot_be_rewritten_opens_as_it_is_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "jobs.db"
    make_file_as_written(path)
    before = table_sql(path)
    # The jobs table's rewrite goes through, then SQLite refuses the job_records one (an
    # integer overflow): the savepoint takes the first back too.
    refusing = (
        "UPDATE sqlite_master SET sql = :sql WHERE type = 'table' AND name = :name"
        " AND CASE WHEN :name = 'job_records' THEN abs(-9223372036854775807 - 1) ELSE 1 END"
    )
    monkeypatch.setattr(_schema, "REWRITE_TABLE_SQL", refusing)
    caplog.set_level("INFO", logger="sqliteq")
    with sqliteq.new(path) as queues:
        q = queues.new_queue("a")
        assert q.enqueue(b"2") and len(q) == 2
    after = table_sql(path)
    assert "CREATE TABLE queue_settings" in after.pop("queue_settings")  # added, not rewritten
    assert after == before
    said = [r.getMessage() for r in caplog.records if "CHECK constraints" in r.getMessage()]
    assert len(said) == 1 and str(path) in said[0] and "integer overflow" in said[0]
