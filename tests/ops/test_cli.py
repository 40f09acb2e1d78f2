"""The ``varmq`` command, run as a subprocess (console script and ``python -m varmq``).

Stores are real: a SQLite file in a temporary directory and a redis-server. Queues and dead
letters are set up through the adapters' own API, as a consumer process would leave them.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import redisq
import sqliteq

VARMQ = str(Path(sys.executable).parent / "varmq")
_JOB = b'{"id": "job-%d", "status": "Created", "data": %d}'


def run(
    *args: str, stdin: str = "", module: bool = False, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "varmq"] if module else [VARMQ]
    return subprocess.run(
        [*command, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def _fill(store: Any) -> None:
    """emails: 4 waiting, 1 in flight, 1 delayed, 2 dead; urgent (priority): 1 waiting."""
    emails = store.new_queue("emails")
    for n in range(7):
        assert emails.enqueue(_JOB % (n, n))
    for _ in range(2):
        taken = emails.dequeue_with_ack_id()
        assert taken is not None
        assert emails.dead_letter(taken[1], f"ValueError: job failed\nline two {uuid.uuid4()}")
    assert emails.dequeue_with_ack_id() is not None  # left in flight
    assert emails.enqueue_delayed(_JOB % (9, 9), 3600)
    store.new_priority_queue("urgent").enqueue(_JOB % (8, 8), 5)


@pytest.fixture
def sqlite_url(tmp_path: Path) -> Iterator[str]:
    path = tmp_path / "jobs.db"
    store = sqliteq.new(path)
    _fill(store)
    yield str(path)
    store.close()


@pytest.fixture
def redis_store(redis_db: str) -> Iterator[str]:
    store = redisq.new(redis_db)
    _fill(store)
    yield redis_db
    store.close()


@pytest.fixture(params=["sqlite", "redis"])
def url(request: pytest.FixtureRequest) -> str:
    fixture = "sqlite_url" if request.param == "sqlite" else "redis_store"
    value: str = request.getfixturevalue(fixture)
    return value


def _stats(url: str) -> dict[str, dict[str, Any]]:
    done = run("stats", url, "--json")
    assert done.returncode == 0, done.stderr
    return {row["name"]: row for row in json.loads(done.stdout)}


# -- stats and watch --------------------------------------------------------------------------


def test_stats_json_gives_every_queue_with_its_counts(url: str) -> None:
    rows = _stats(url)
    assert set(rows) == {"emails", "urgent"}
    emails = rows["emails"]
    assert emails["kind"] == "fifo"
    assert (emails["waiting"], emails["in_flight"], emails["delayed"], emails["dead"]) == (
        4,
        1,
        1,
        2,
    )
    assert emails["oldest_age"] >= 0
    assert rows["urgent"]["kind"] == "priority"
    assert rows["urgent"]["waiting"] == 1


def test_stats_prints_a_table_with_one_line_per_queue(url: str) -> None:
    done = run("stats", url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].split() == [
        "QUEUE",
        "KIND",
        "WAITING",
        "IN_FLIGHT",
        "DELAYED",
        "DEAD",
        "OLDEST_AGE",
        "RATE",
    ]
    assert lines[1].split()[:6] == ["emails", "fifo", "4", "1", "1", "2"]
    assert lines[1].split()[-1] == "-"  # no rate limit
    assert lines[2].split()[:3] == ["urgent", "priority", "1"]


def test_stats_says_when_a_rate_limited_queue_is_throttled(tmp_path: Path) -> None:
    store = sqliteq.new(tmp_path / "limited.db")
    try:
        limited = store.new_queue("calls", rate_limit="2/h")
        for i in range(3):
            limited.enqueue(f"job-{i}".encode())
        assert len(limited.dequeue_batch_with_ack_ids(3)) == 2
        done = run("stats", f"sqlite:{tmp_path / 'limited.db'}")
        assert done.returncode == 0, done.stderr
        [row] = [line for line in done.stdout.splitlines() if line.startswith("calls")]
        assert row.split()[2] == "1" and row.endswith("2 in window, throttled"), row
        [as_json] = json.loads(run("stats", f"sqlite:{tmp_path / 'limited.db'}", "--json").stdout)
        assert (as_json["rate_window_used"], as_json["throttled"]) == (2, True)
    finally:
        store.close()


def test_python_dash_m_varmq_runs_the_same_command(sqlite_url: str) -> None:
    done = run("stats", "sqlite:" + sqlite_url, "--json", module=True)
    assert done.returncode == 0, done.stderr
    assert {row["name"] for row in json.loads(done.stdout)} == {"emails", "urgent"}


def test_watch_refreshes_count_times_and_exits_zero(url: str) -> None:
    done = run("watch", url, "--interval", "0.05", "--count", "3")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("QUEUE") == 3
    assert "\x1b[" not in done.stdout  # no screen clearing when stdout is not a terminal


# -- dead letters -----------------------------------------------------------------------------


def test_dead_lists_dead_letters_oldest_first_with_keys(url: str) -> None:
    done = run("dead", url, "emails", "--json")
    assert done.returncode == 0, done.stderr
    letters = json.loads(done.stdout)
    assert [d["id"] for d in letters] == ["job-0", "job-1"]
    assert all(d["attempts"] == 1 for d in letters)
    assert letters[0]["error"].startswith("ValueError: job failed")
    assert letters[0]["data"] == 0  # decoded from the stored envelope
    assert json.loads(letters[0]["item"])["data"] == 0
    table = run("dead", url, "emails", "--limit", "1")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split()[:4] == ["KEY", "JOB_ID", "ATTEMPTS", "DEAD_AT"]
    assert len(lines) == 2 and letters[0]["key"] in lines[1]


def test_requeue_dead_with_keys_puts_those_back_in_line(url: str) -> None:
    letters = json.loads(run("dead", url, "emails", "--json").stdout)
    done = run("requeue-dead", url, "emails", letters[0]["key"])
    assert done.returncode == 0, done.stderr
    assert "requeued 1 dead letter of queue 'emails'" in done.stdout
    rows = _stats(url)
    assert (rows["emails"]["waiting"], rows["emails"]["dead"]) == (5, 1)


def test_requeue_dead_all_puts_every_dead_letter_back(url: str) -> None:
    done = run("requeue-dead", url, "emails", "--all")
    assert done.returncode == 0, done.stderr
    assert "requeued 2 dead letters" in done.stdout
    assert (_stats(url)["emails"]["waiting"], _stats(url)["emails"]["dead"]) == (6, 0)


def test_requeue_dead_needs_all_or_keys_but_not_both(url: str) -> None:
    for args in ([], ["--all", "some-key"]):
        done = run("requeue-dead", url, "emails", *args)
        assert done.returncode == 2
        assert "--all or dead-letter KEYs" in done.stderr


def test_requeue_dead_with_an_unknown_key_exits_1(url: str) -> None:
    done = run("requeue-dead", url, "emails", "no-such-key")
    assert done.returncode == 1
    assert "requeued 0" in done.stdout
    assert _stats(url)["emails"]["dead"] == 2


# -- purge ------------------------------------------------------------------------------------


def test_purge_asks_and_a_no_keeps_the_jobs(url: str) -> None:
    done = run("purge", url, "emails", stdin="n\n")
    assert done.returncode == 1
    assert "Delete 4 waiting jobs of queue 'emails'? [y/N]" in done.stderr
    assert "nothing deleted" in done.stderr
    assert _stats(url)["emails"]["waiting"] == 4


def test_purge_without_an_answer_deletes_nothing(url: str) -> None:
    done = run("purge", url, "emails", stdin="")
    assert done.returncode == 1
    assert _stats(url)["emails"]["waiting"] == 4


def test_purge_confirmed_deletes_waiting_jobs_only(url: str) -> None:
    done = run("purge", url, "emails", stdin="y\n")
    assert done.returncode == 0, done.stderr
    assert "purged 4 waiting jobs of queue 'emails'" in done.stdout
    emails = _stats(url)["emails"]
    assert (emails["waiting"], emails["dead"], emails["delayed"]) == (0, 2, 1)


def test_purge_yes_does_not_ask(url: str) -> None:
    done = run("purge", url, "urgent", "--yes")
    assert done.returncode == 0, done.stderr
    assert "[y/N]" not in done.stderr
    assert _stats(url)["urgent"]["waiting"] == 0


def test_purge_dead_deletes_the_dead_letters_only(url: str) -> None:
    done = run("purge", url, "emails", "--dead", "--yes")
    assert done.returncode == 0, done.stderr
    assert "purged 2 dead letters" in done.stdout
    emails = _stats(url)["emails"]
    assert (emails["waiting"], emails["dead"]) == (4, 0)


# -- errors -----------------------------------------------------------------------------------


def _assert_clean_failure(done: subprocess.CompletedProcess[str], code: int, text: str) -> None:
    assert done.returncode == code, (done.stdout, done.stderr)
    assert text in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("command", [["stats"], ["dead", "_", "emails"], ["purge", "_", "q"]])
def test_missing_file_is_named_and_exits_2(tmp_path: Path, command: list[str]) -> None:
    path = tmp_path / "absent.db"
    args = [str(path) if a == "_" else a for a in command]
    if len(args) == 1:
        args.append(str(path))
    done = run(*args)
    _assert_clean_failure(done, 2, f"no such file: {path}")
    assert not path.exists()


def test_file_that_is_not_a_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just some notes, certainly not SQLite\n" * 10)
    before = path.read_bytes()
    _assert_clean_failure(run("stats", str(path)), 2, "is not a SQLite database")
    assert path.read_bytes() == before


def _foreign_file(path: Path, *statements: str) -> Path:
    """A SQLite file another application made with ``statements``."""
    conn = sqlite3.connect(path)
    for statement in statements:
        conn.execute(statement)
    conn.commit()
    conn.close()
    return path


def test_sqlite_database_of_another_application_is_refused(tmp_path: Path) -> None:
    path = _foreign_file(tmp_path / "other.db", "CREATE TABLE customers (id INTEGER PRIMARY KEY)")
    _assert_clean_failure(run("stats", str(path)), 2, "another application")


@pytest.mark.parametrize("content", [b"", None])
def test_empty_file_or_empty_sqlite_database_is_refused_untouched(
    tmp_path: Path, content: bytes | None
) -> None:
    path = tmp_path / "empty.db"
    if content is None:
        sqlite3.connect(path).close()  # a SQLite file with nothing in it
        path.write_bytes(path.read_bytes())
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    _assert_clean_failure(run("stats", str(path)), 2, "not a sqliteq database")
    assert path.read_bytes() == before


def test_directory_is_refused(tmp_path: Path) -> None:
    _assert_clean_failure(run("stats", str(tmp_path)), 2, "is not a regular file")


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def test_unreachable_redis_is_named_and_exits_2() -> None:
    url = f"redis://:hunter2@127.0.0.1:{_closed_port()}/0"
    done = run("stats", url)
    _assert_clean_failure(done, 2, "is unreachable")
    assert "***@127.0.0.1" in done.stderr
    assert "hunter2" not in done.stderr


def test_unsupported_url_scheme_exits_2() -> None:
    _assert_clean_failure(run("stats", "postgres://db/jobs"), 2, "unsupported URL")


def test_unknown_queue_is_named_with_the_known_ones_and_exits_2(url: str) -> None:
    for command in (["dead"], ["requeue-dead", "--all"], ["purge", "--yes"]):
        done = run(command[0], url, "nope", *command[1:])
        _assert_clean_failure(done, 2, "no queue named 'nope'")
        assert "(queues: emails, urgent)" in done.stderr


@pytest.mark.parametrize(
    "args",
    [[], ["stats"], ["frobnicate", "x"], ["dead", "x"], ["watch", "x", "--count", "0"]],
)
def test_usage_errors_exit_2(args: list[str]) -> None:
    done = run(*args)
    assert done.returncode == 2
    assert "usage: varmq" in done.stderr
    assert "Traceback" not in done.stderr


def test_help_lists_every_command() -> None:
    done = run("--help")
    assert done.returncode == 0
    for command in ("stats", "watch", "dead", "requeue-dead", "purge"):
        assert command in done.stdout


# -- stores opened by their adapters, found by URL scheme -------------------------------------

_FAKE_ADAPTER = '''
"""A third-party adapter for the tests: the reference storage behind fakestore:// URLs."""

from varmq.testing.storage import MemoryStorage

URL_SCHEMES = ("fakestore",)
_JOB = b'{"id": "job-%d", "status": "Created", "data": %d}'


class Store:
    def __init__(self, down):
        self.storage = MemoryStorage()
        jobs = self.storage.new_queue("jobs")
        for n in range(3):
            jobs.enqueue(_JOB % (n, n))
        taken = jobs.dequeue_with_ack_id()
        jobs.dead_letter(taken[1], "ValueError: no")
        self.down = down
        self.location = "fakestore://demo"

    def list_queues(self):
        return self.storage.list_queues()

    def open_queue(self, name):
        queue = self.storage.open_queue(name)
        if self.down:
            queue.faults.unreachable = ConnectionError("fake store down")
        return queue

    def close(self):
        self.storage.close()


def open_url(url):
    if "@" in url:
        raise ConnectionError(f"cannot reach {url}")
    return Store(down=url.endswith("down"))
'''


@pytest.fixture
def fake_adapter(tmp_path: Path) -> dict[str, str]:
    """An installed third-party adapter: a module and a distribution naming it in the
    varmq.stores entry-point group; the environment to run the command with."""
    (tmp_path / "fake_adapter.py").write_text(_FAKE_ADAPTER)
    info = tmp_path / "fake_adapter-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-adapter\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[varmq.stores]\nfake = fake_adapter\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}


def test_a_third_party_adapter_in_the_entry_point_group_serves_stats_and_dead(
    fake_adapter: dict[str, str],
) -> None:
    stats = run("stats", "fakestore://demo", "--json", env=fake_adapter)
    assert stats.returncode == 0, stats.stderr
    [row] = json.loads(stats.stdout)
    assert (row["name"], row["waiting"], row["dead"], row["reachable"]) == ("jobs", 2, 1, True)
    dead = run("dead", "fakestore://demo", "jobs", "--json", env=fake_adapter)
    assert dead.returncode == 0, dead.stderr
    [letter] = json.loads(dead.stdout)
    assert (letter["id"], letter["data"], letter["error"]) == ("job-0", 0, "ValueError: no")


def test_stats_of_a_store_that_cannot_answer_say_unreachable_never_zero(
    fake_adapter: dict[str, str],
) -> None:
    done = run("stats", "fakestore://down", env=fake_adapter)
    assert done.returncode == 1
    assert done.stdout.splitlines()[1].split()[:3] == ["jobs", "fifo", "unreachable"]
    assert "queue 'jobs' in fakestore://demo is unreachable: ConnectionError" in done.stderr
    as_json = run("stats", "fakestore://down", "--json", env=fake_adapter)
    [row] = json.loads(as_json.stdout)
    assert row["reachable"] is False and row["waiting"] is None
    assert "fake store down" in row["error"]


def test_an_adapter_error_quoting_the_url_has_its_password_hidden(
    fake_adapter: dict[str, str],
) -> None:
    done = run("stats", "fakestore://admin:s3cret@demo", env=fake_adapter)
    _assert_clean_failure(done, 2, "cannot reach fakestore://admin:***@demo")
    assert "s3cret" not in done.stderr


def test_the_operator_modules_import_no_adapter_until_a_url_asks_for_one() -> None:
    code = (
        "import sys, varmq, varmq.ops.cli, varmq.ops.view, varmq.rest, varmq.stores; "
        "print(sorted(m for m in ('sqliteq', 'redisq', 'redis') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


# -- passwords never shown (item: one redaction, used everywhere) ------------------------------


def _with_credentials(url: str, *, query: bool) -> str:
    """``url`` (no credentials) with a password Redis accepts: the default user has none, so
    ``AUTH default <anything>`` succeeds."""
    if query:
        return url + ("&" if "?" in url else "?") + "username=default&password=hunter2"
    return url.replace("redis://", "redis://default:hunter2@", 1)


@pytest.mark.parametrize("query", [False, True], ids=["user-info", "password-parameter"])
def test_messages_about_a_redis_url_never_show_its_password(redis_db: str, query: bool) -> None:
    url = _with_credentials(redis_db, query=query)
    empty = run("stats", url)
    assert empty.returncode == 0, empty.stderr
    assert "no queues in redis://" in empty.stdout
    watch = run("watch", url, "--count", "1")
    unknown = run("dead", url, "nope")
    _assert_clean_failure(unknown, 2, "no queue named 'nope'")
    for done in (empty, watch, unknown):
        assert "hunter2" not in done.stdout + done.stderr
        assert "***" in done.stdout + done.stderr


def test_unreachable_redis_hides_a_password_query_parameter() -> None:
    done = run("stats", f"redis://127.0.0.1:{_closed_port()}/0?password=hunter2")
    _assert_clean_failure(done, 2, "is unreachable")
    assert "hunter2" not in done.stderr and "password=***" in done.stderr


def test_an_unsupported_url_is_shown_without_its_password() -> None:
    done = run("stats", "postgres://admin:hunter2@db/jobs")
    _assert_clean_failure(done, 2, "unsupported URL 'postgres://admin:***@db/jobs'")
    assert "hunter2" not in done.stderr


# -- inspection never changes the file (item: read-only inspection) -----------------------------


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def test_stats_of_an_older_schema_names_both_versions_and_upgrades_nothing(
    tmp_path: Path,
) -> None:
    from sqliteq import (  # the schema steps, to build a file as an older sqliteq left it
        _schema,
        _sql,
    )

    older = _schema.SCHEMA_VERSION - 1
    path = _foreign_file(
        tmp_path / "old.db",
        *(statement for step in _schema.MIGRATIONS[:older] for statement in step),
        _sql.SET_APPLICATION_ID.format(value=_schema.APPLICATION_ID),
        _sql.SET_USER_VERSION.format(value=older),
    )
    before = _files(tmp_path)
    done = run("stats", str(path))
    _assert_clean_failure(done, 2, str(older))
    assert str(_schema.SCHEMA_VERSION) in done.stderr
    assert _files(tmp_path) == before


def test_stats_and_dead_leave_a_closed_database_byte_for_byte_with_no_wal_or_shm(
    tmp_path: Path,
) -> None:
    path = tmp_path / "jobs.db"
    store = sqliteq.new(path)
    _fill(store)
    store.close()
    before = _files(tmp_path)
    assert set(before) == {"jobs.db"}
    for args in (["stats", str(path)], ["dead", str(path), "emails"]):
        done = run(*args)
        assert done.returncode == 0, done.stderr
        assert _files(tmp_path) == before


def test_a_sqlite_file_holding_only_a_view_is_refused_untouched(tmp_path: Path) -> None:
    path = _foreign_file(tmp_path / "report.db", "CREATE VIEW totals AS SELECT 1 AS n")
    before = _files(tmp_path)
    done = run("stats", str(path))
    assert done.returncode == 2, done.stdout
    assert "refusing to open it" in done.stderr and "Traceback" not in done.stderr
    assert _files(tmp_path) == before
    with sqlite3.connect(path) as check:
        assert check.execute("PRAGMA user_version").fetchone()[0] == 0
        assert check.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 1


@pytest.mark.parametrize("name", ["we?ird.db", "odd#name.db", "both?x#y.db"])
def test_a_path_with_question_mark_or_hash_is_a_path_and_leaves_no_stray_file(
    tmp_path: Path, name: str
) -> None:
    path = tmp_path / name
    store = sqliteq.new(path)
    _fill(store)
    store.close()
    before = {p.name for p in tmp_path.iterdir()}
    done = run("stats", str(path), "--json")
    assert done.returncode == 0, done.stderr
    assert {row["name"] for row in json.loads(done.stdout)} == {"emails", "urgent"}
    assert {p.name for p in tmp_path.iterdir()} == before
