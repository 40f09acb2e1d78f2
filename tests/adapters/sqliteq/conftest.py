"""Fixtures of the sqliteq tests: a file per test, and a clock that moves only when told.

``queues`` opens ``db_path`` with ``clock`` (integer Unix milliseconds, starting at a fixed
time), so lease and delay tests take no real time; ``rows`` looks at the file from outside
the adapter.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import sqliteq
from varmq.testing import FakeWallClock

START_MS = 1_700_000_000_000
"""Where ``clock`` starts: 2023-11-14, so stored times are fixed numbers in every run."""


@pytest.fixture
def clock() -> FakeWallClock:
    return FakeWallClock(START_MS)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "jobs.db"


@pytest.fixture
def queues(db_path: Path, clock: FakeWallClock) -> Iterator[sqliteq.Queues]:
    opened = sqliteq.new(db_path, clock=clock)
    yield opened
    opened.close()


def rows(db_path: Path, sql: str, *params: Any) -> list[tuple[Any, ...]]:
    """Look at the file from outside the adapter."""
    conn = sqlite3.connect(db_path)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


def corrupt_jobs_pages(db_path: Path) -> None:
    """Overwrite every page of the jobs table and its indexes but the first with garbage."""
    conn = sqlite3.connect(db_path)
    pages = [
        row[0]
        for row in conn.execute(
            "SELECT pageno FROM dbstat WHERE name LIKE 'jobs%' AND pagetype <> 'overflow'"
        )
    ]
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    conn.close()
    with open(db_path, "r+b") as fh:
        for page in pages:
            fh.seek((page - 1) * page_size)
            fh.write(b"\xa5" * page_size)


def undo_version_7(conn: sqlite3.Connection) -> None:
    """Take a file's schema back from version 7 to version 6 (job progress), rows kept, as a
    version-6 sqliteq wrote it."""
    conn.execute("ALTER TABLE jobs DROP COLUMN progress")
    conn.execute("ALTER TABLE job_records DROP COLUMN progress")
    conn.execute("PRAGMA user_version = 6")


def undo_version_6(conn: sqlite3.Connection) -> None:
    """Take a file's schema back from the current version to version 5 (job records), rows
    kept, as a version-5 sqliteq wrote it (without the settings table, which no version-5
    sqliteq made)."""
    undo_version_7(conn)
    conn.execute("DROP TABLE IF EXISTS queue_settings")
    conn.execute("DROP TABLE job_records")
    conn.execute("DROP INDEX jobs_cancel")
    conn.execute("DROP INDEX jobs_line")
    conn.execute("ALTER TABLE jobs DROP COLUMN started_at")
    conn.execute("ALTER TABLE jobs DROP COLUMN cancel")
    conn.execute("ALTER TABLE jobs DROP COLUMN keep_ms")
    conn.execute("ALTER TABLE queues DROP COLUMN ended")
    conn.execute(
        "CREATE INDEX jobs_line ON jobs (queue, priority, available_at, id, state, lease_until)"
        " WHERE state IN ('ready', 'leased')"
    )
    conn.execute("PRAGMA user_version = 5")


ACTORS = Path(__file__).with_name("actors.py")
"""The processes of this directory's process tests (``actors.py ROLE ARGS``)."""


def spawn_actor(*args: str) -> subprocess.Popen[str]:
    """Start ``actors.py`` with ``args`` in a process of its own, reading its output as text."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [sys.executable, str(ACTORS), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def read_until(process: subprocess.Popen[str], prefix: str) -> str:
    """The first line of ``process``'s output that starts with ``prefix`` (a blocking read)."""
    assert process.stdout is not None
    for line in process.stdout:
        if line.startswith(prefix):
            return line.strip()
    stderr = process.stderr.read() if process.stderr is not None else ""
    raise AssertionError(f"{prefix!r} never came; stderr: {stderr}")
