"""The operator view (varmq.ops.view) and opening stores by URL (varmq.ops.stores), in this
process."""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

import sqliteq
import varmq
from varmq.ops.stores import StoreError, open_store, redact_url, scheme_of, scrub
from varmq.ops.view import (
    StoreView,
    bound_dead_letters,
    bound_queues,
    dead_letter_rows,
    find_workers,
)
from varmq.testing.storage import MemoryStorage

_JOB = b'{"id": "job-%d", "status": "Created", "data": %d}'


def _paused(workers: list[Any], name: str | None = None) -> Any:
    worker = varmq.new_worker(lambda job: None, 1, name=name or f"w-{uuid.uuid4().hex[:6]}")
    workers.append(worker)
    worker.pause()
    assert worker.wait_until_paused(10)
    return worker


# -- workers and bound queues -----------------------------------------------------------------


def test_find_workers_keeps_workers_only_and_names_a_list_by_worker_name(
    workers: list[Any],
) -> None:
    worker = _paused(workers)
    assert find_workers({"a": worker, "b": None, "c": "text"}) == {"a": worker}
    assert find_workers([worker]) == {worker.name: worker}
    assert find_workers()[worker.name] is worker  # the registry of named workers


def test_a_storage_queue_bound_by_two_workers_is_one_row_naming_both(workers: list[Any]) -> None:
    storage = MemoryStorage()
    first, second = _paused(workers), _paused(workers)
    for worker in (first, second):
        worker.with_persistent_queue(storage.new_queue("orders"))
    first.bind_queue(name="local")
    second.bind_queue(name="local")
    assert storage.new_queue("orders").enqueue(_JOB % (1, 1))
    rows = bound_queues({first.name: first, second.name: second})
    orders = [r for r in rows if r["name"] == "orders"]
    assert len(orders) == 1
    assert orders[0]["workers"] == [first.name, second.name]
    assert orders[0]["waiting"] == 1 and orders[0]["reachable"] is True
    # In-memory queues belong to their worker, whatever their names.
    assert [r["workers"] for r in rows if r["name"] == "local"] == [[first.name], [second.name]]


def test_a_bound_queue_whose_storage_cannot_answer_has_no_counts(workers: list[Any]) -> None:
    storage = MemoryStorage()
    worker = _paused(workers)
    worker.with_persistent_queue(storage.new_queue("orders"))
    with storage.outage(ConnectionError("disk gone")):
        [row] = bound_queues({worker.name: worker})
    assert row["reachable"] is False
    assert "disk gone" in row["error"]
    assert [row[k] for k in ("waiting", "in_flight", "delayed", "dead")] == [None] * 4


def test_dead_letters_of_bound_queues_are_decoded_rows(workers: list[Any]) -> None:
    storage = MemoryStorage()
    worker = _paused(workers)
    worker.with_persistent_queue(storage.new_queue("orders"))
    producer = storage.new_queue("orders")
    assert producer.enqueue(_JOB % (7, 7)) and producer.enqueue(b"not json")
    for _ in range(2):
        taken = producer.dequeue_with_ack_id()
        assert taken is not None and producer.dead_letter(taken[1], "boom")
    mine = {worker.name: worker}
    rows = bound_dead_letters(mine, "orders", 10)
    assert rows is not None
    assert [(r["id"], r["data"], r["error"]) for r in rows] == [
        ("job-7", 7, "boom"),
        ("", None, "boom"),
    ]
    assert rows[1]["item"] == "not json"
    limited = bound_dead_letters(mine, "orders", 1)
    assert limited is not None and len(limited) == 1
    assert bound_dead_letters(mine, "nope", 10) is None


def test_dead_letter_rows_decode_each_envelope_once() -> None:
    [row] = dead_letter_rows(
        [{"key": 3, "item": _JOB % (1, 1), "attempts": 2, "error": "x", "dead_at": 5.0}]
    )
    assert row == {
        "key": "3",
        "id": "job-1",
        "attempts": 2,
        "error": "x",
        "dead_at": 5.0,
        "data": 1,
        "item": (_JOB % (1, 1)).decode(),
    }


# -- a store's queues -------------------------------------------------------------------------


class _Flaky:
    """A store whose listing fails while ``down`` is set."""

    def __init__(self, storage: MemoryStorage) -> None:
        self.storage = storage
        self.down = threading.Event()

    def list_queues(self) -> list[tuple[str, str]]:
        if self.down.is_set():
            raise ConnectionError("listing failed")
        return self.storage.list_queues()

    def open_queue(self, name: str) -> Any:
        return self.storage.open_queue(name)


def test_a_store_whose_listing_fails_shows_the_queues_it_knew_as_unreachable() -> None:
    storage = MemoryStorage()
    storage.new_queue("a").enqueue(_JOB % (1, 1))
    storage.new_priority_queue("b")
    store = _Flaky(storage)
    view = StoreView(store)
    assert [(r["name"], r["kind"], r["waiting"]) for r in view.rows()] == [
        ("a", "fifo", 1),
        ("b", "priority", 0),
    ]
    store.down.set()
    rows = view.rows()
    assert [(r["name"], r["reachable"], r["waiting"]) for r in rows] == [
        ("a", False, None),
        ("b", False, None),
    ]
    assert view.error == "ConnectionError: listing failed"
    store.down.clear()
    assert all(r["reachable"] for r in view.rows()) and view.error is None


# -- opening by URL ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "scheme"),
    [
        ("jobs.db", ""),
        ("/var/lib/jobs.db", ""),
        ("a:b.db", ""),
        ("C:\\jobs.db", ""),
        ("sqlite:jobs.db", "sqlite"),
        ("sqlite:///abs/jobs.db", "sqlite"),
        ("redis://localhost/0", "redis"),
        ("UNIX:///run/redis.sock", "unix"),
        ("postgres://db/jobs", "postgres"),
    ],
)
def test_a_url_has_a_scheme_only_when_it_names_one(url: str, scheme: str) -> None:
    assert scheme_of(url) == scheme


def test_open_store_opens_an_existing_sqlite_file_and_closes_it(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    sqliteq.new(path).close()
    with open_store("sqlite:" + str(path), read_only=True) as store:
        assert store.location == str(path)
        assert store.list_queues() == []


def test_open_store_creates_nothing_and_names_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    with pytest.raises(StoreError, match="no such file"), open_store(str(path)):
        pass
    assert not path.exists()


_URLS = [
    "redis://localhost:6379/0",
    "redis://:secret@localhost:6379/0",
    "redis://user:secret@localhost/0",
    "rediss://user:secret@[::1]:6380/2",
    "redis://localhost/0?password=secret&db=1",
    "redis://localhost/0?ssl_password=secret#frag",
    "unix:///run/redis.sock?password=secret",
    "redis://user:secret@host:notaport/0",
]


@pytest.mark.parametrize("url", _URLS)
def test_the_redaction_hides_every_secret(url: str) -> None:
    assert "secret" not in redact_url(url)


def test_scrub_hides_the_url_and_its_secrets_wherever_a_message_quotes_them() -> None:
    url = "redis://admin:hunter2@db:6379/0?password=other"
    message = f"cannot reach {url}; AUTH hunter2 failed, other too"
    cleaned = scrub(message, url)
    assert "hunter2" not in cleaned and "other" not in cleaned
    assert "redis://admin:***@db:6379/0?password=***" in cleaned
