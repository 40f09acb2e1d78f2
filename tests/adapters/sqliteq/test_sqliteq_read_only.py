"""Opening a file read-only: it is looked at, never written, not even -wal/-shm files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import sqliteq
from sqliteq import _schema, _sql


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _filled(path: Path) -> Path:
    with sqliteq.new(path) as store:
        q = store.new_queue("emails")
        q.enqueue(b"a")
        q.enqueue(b"b")
        store.new_priority_queue("urgent").enqueue(b"c", 1)
    return path


@pytest.mark.parametrize("name", ["jobs.db", "we?ird.db", "odd#name.db", "100%.db"])
def test_a_read_only_open_reads_and_leaves_every_file_as_it_was(tmp_path: Path, name: str) -> None:
    path = _filled(tmp_path / name)
    before = _files(tmp_path)
    with sqliteq.open_url(str(path), create=False, read_only=True) as store:
        assert store.list_queues() == [("emails", "fifo"), ("urgent", "priority")]
        q = store.open_queue("emails")
        assert len(q) == 2 and q.stats()["waiting"] == 2
        assert q.values() == [b"a", b"b"]
        assert q.dead_letters() == []
        assert _files(tmp_path) == before  # no -wal, no -shm while open
    assert _files(tmp_path) == before


def test_writes_on_a_read_only_store_raise_and_write_nothing(tmp_path: Path) -> None:
    path = _filled(tmp_path / "jobs.db")
    before = _files(tmp_path)
    with sqliteq.new(path, create=False, read_only=True) as store:
        q = store.open_queue("emails")
        for call in (lambda: q.enqueue(b"x"), lambda: q.dequeue_with_ack_id(), q.purge):
            with pytest.raises(sqliteq.ReadOnlyError, match="read-only"):
                call()
        with pytest.raises(sqliteq.QueueNotFoundError):
            store.new_queue("never-made")
        with pytest.raises(sqliteq.QueueKindError):
            store.new_priority_queue("emails")
    assert _files(tmp_path) == before


def test_a_read_only_store_sees_what_a_writer_commits(tmp_path: Path) -> None:
    path = _filled(tmp_path / "jobs.db")
    with sqliteq.new(path, create=False, read_only=True) as reader:
        seen = reader.open_queue("emails")
        with sqliteq.new(path) as writer:
            writer.new_queue("emails").enqueue(b"later")
            assert len(seen) == 3


def test_read_only_needs_create_false(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="create=False"):
        sqliteq.new(tmp_path / "jobs.db", read_only=True)
    with pytest.raises(FileNotFoundError):
        sqliteq.open_url(str(tmp_path / "absent.db"), read_only=True)
    assert list(tmp_path.iterdir()) == []


def _older_file(path: Path) -> Path:
    older = _schema.SCHEMA_VERSION - 1
    conn = sqlite3.connect(path)
    for step in _schema.MIGRATIONS[:older]:
        for statement in step:
            conn.execute(statement)
    conn.execute(_sql.SET_APPLICATION_ID.format(value=_schema.APPLICATION_ID))
    conn.execute(_sql.SET_USER_VERSION.format(value=older))
    conn.commit()
    conn.close()
    return path


def test_a_read_only_open_names_an_older_schema_and_upgrades_nothing(tmp_path: Path) -> None:
    path = _older_file(tmp_path / "old.db")
    before = _files(tmp_path)
    with pytest.raises(sqliteq.SchemaVersionError) as raised:
        sqliteq.open_url(str(path), read_only=True)
    text = str(raised.value)
    assert f"version {_schema.SCHEMA_VERSION - 1}" in text and f"({_schema.SCHEMA_VERSION})" in text
    assert "older" in text
    assert _files(tmp_path) == before
    with sqliteq.new(path, create=False) as upgraded:  # read-write: upgraded in place
        assert upgraded.list_queues() == []


def test_a_read_only_open_names_a_newer_schema(tmp_path: Path) -> None:
    path = _filled(tmp_path / "jobs.db")
    conn = sqlite3.connect(path)
    conn.execute(_sql.SET_USER_VERSION.format(value=_schema.SCHEMA_VERSION + 1))
    conn.commit()
    conn.close()
    with pytest.raises(sqliteq.SchemaVersionError, match="newer"):
        sqliteq.open_url(str(path), read_only=True)


@pytest.mark.parametrize("read_only", [False, True])
def test_a_file_holding_only_a_view_is_foreign(tmp_path: Path, read_only: bool) -> None:
    path = tmp_path / "report.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE VIEW totals AS SELECT 1 AS n")
    conn.commit()
    conn.close()
    before = _files(tmp_path)
    with pytest.raises(sqliteq.ForeignDatabaseError, match="totals"):
        sqliteq.new(path, create=not read_only, read_only=read_only)
    assert _files(tmp_path) == before
