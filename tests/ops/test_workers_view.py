"""Workers of every process as operators see them: ``varmq workers URL`` (a table, ``--json``,
the URL from ``VARMQ_URL``) and REST ``GET /workers`` (the served workers, then the records of
the other workers the stores of their queues keep). Another process's worker is a record
written straight through the store's registry, as that process's renewal thread would."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import http

import sqliteq
import varmq
from varmq.contract.workers import encode_worker
from varmq.ops import cli
from varmq.rest import wsgi_app


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Any]:
    store = sqliteq.new(tmp_path / "jobs.db")
    yield store
    store.close()


def _other_process_worker(store: Any, name: str, *, expires_after: float = 60.0) -> str:
    worker_id = uuid.uuid4().hex
    record = encode_worker(
        worker_id=worker_id,
        name=name,
        host="host-b",
        pid=777,
        queues=["emails"],
        concurrency=4,
        running=1,
        completed=12,
        failed=2,
    )
    store.new_queue("emails").worker_registry.register_worker(worker_id, record, expires_after)
    return worker_id


def test_varmq_workers_prints_every_worker_of_the_store_with_alive_or_gone(
    db: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    _other_process_worker(db, "mailer")
    _other_process_worker(db, "stale", expires_after=0.0)
    assert cli.main(["workers", db.path]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "ID",
        "NAME",
        "HOST",
        "PID",
        "QUEUES",
        "CONCURRENCY",
        "RUNNING",
        "COMPLETED",
        "FAILED",
        "LAST_SEEN",
        "STATE",
    ]
    mailer, stale = lines[1].split(), lines[2].split()  # living workers first
    assert mailer[1:9] == ["mailer", "host-b", "777", "emails", "4", "1", "12", "2"]
    assert mailer[-1] == "alive" and stale[1] == "stale" and stale[-1] == "gone"


def test_varmq_workers_json_gives_every_field_and_takes_the_url_from_varmq_url(
    db: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    worker_id = _other_process_worker(db, "mailer")
    monkeypatch.setenv("VARMQ_URL", f"sqlite:{db.path}")
    assert cli.main(["workers", "--json"]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["id"] == worker_id and row["alive"] is True
    assert set(row) == {
        "id",
        "name",
        "host",
        "pid",
        "queues",
        "concurrency",
        "started_at",
        "last_seen",
        "running",
        "completed",
        "failed",
        "alive",
    }
    assert abs(row["last_seen"] - time.time()) < 60


def test_varmq_workers_says_when_no_worker_consumes_the_store(
    db: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    db.new_queue("emails")
    assert cli.main(["workers", db.path]) == 0
    assert capsys.readouterr().out == f"no workers in {db.path}\n"


def test_rest_workers_lists_the_served_workers_then_the_other_processes_workers(
    db: Any, serve_wsgi: Callable[[Any], str]
) -> None:
    other_id = _other_process_worker(db, "elsewhere")
    name = f"here-{uuid.uuid4().hex[:6]}"
    worker = varmq.new_worker(lambda job: None, 2, name=name)
    worker.with_distributed_queue(db.new_distributed_queue("emails"))
    try:
        deadline = time.monotonic() + 10
        while not [w for w in db.workers() if w.name == name]:  # it registered
            assert time.monotonic() < deadline
            time.sleep(0.01)
        base = serve_wsgi(wsgi_app(workers={name: worker}, insecure=True))
        rows = http("GET", base + "/workers").json()
        assert rows[0]["name"] == name and rows[0]["status"] in ("Idle", "Running")
        assert [r["id"] for r in rows[1:]] == [other_id]  # the served one is not listed twice
        assert rows[1]["host"] == "host-b" and rows[1]["alive"] is True
    finally:
        assert worker.stop_and_wait(10)
