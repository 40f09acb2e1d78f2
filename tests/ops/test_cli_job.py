"""``varmq job URL QUEUE ID``: one job's record, from a store that keeps records.

The command opens stores through their adapter (``varmq.stores``); here an adapter of the test's
own opens the reference storage, which keeps records; a sqliteq file is read as a real store
is (read-only).
"""

from __future__ import annotations

import contextlib
import io
import json
import types
from pathlib import Path
from typing import Any

import pytest

import sqliteq
import varmq
from varmq.ops import cli, stores
from varmq.testing.storage import MemoryStorage


class _Store:
    """The reference storage as a store ``open_store`` may close."""

    def __init__(self, storage: MemoryStorage) -> None:
        self._storage = storage

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)

    def close(self) -> None:
        pass


@pytest.fixture
def storage(monkeypatch: pytest.MonkeyPatch) -> MemoryStorage:
    storage = MemoryStorage()
    adapter = types.SimpleNamespace(
        URL_SCHEMES=("mem",), open_url=lambda url, create=True, read_only=False: _Store(storage)
    )
    monkeypatch.setattr(stores, "adapter_for", lambda url: adapter)
    return storage


def _job(*args: str) -> tuple[int, str, str]:
    """``varmq job ARGS`` in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("sys.stdout", out)
        patch.setattr("sys.stderr", err)
        code = cli.main(["job", *args])
    return code, out.getvalue(), err.getvalue()


def _finished(storage: MemoryStorage, fn: Any, job_id: str) -> None:
    worker = varmq.new_result_worker(fn, 1, log_failures=False)
    handle = worker.with_persistent_queue(storage.new_queue("orders", keep_results=60))
    handle.add({"n": 2}, job_id=job_id)
    with contextlib.suppress(varmq.JobFailedError):  # a failed job is what some tests want
        handle.result_of(job_id, 10)
    worker.stop_and_wait()


def test_a_succeeded_job_shows_state_attempts_times_and_result(storage: MemoryStorage) -> None:
    _finished(storage, lambda job: {"total": job.data["n"] * 21}, "o-1")
    code, out, err = _job("mem://x", "orders", "o-1")
    assert (code, err) == (0, "")
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert lines["id:"] == "o-1"
    assert lines["state:"] == "succeeded"
    assert lines["attempts:"] == "1"
    assert lines["result:"] == '{"total": 42}'
    assert lines["finished:"].endswith("Z")

    code, out, _ = _job("mem://x", "orders", "o-1", "--json")
    record = json.loads(out)
    assert (code, record["state"], record["result"]) == (0, "succeeded", {"total": 42})


def test_a_failed_job_shows_its_error_and_traceback(storage: MemoryStorage) -> None:
    def fail(job: varmq.Job[Any]) -> None:
        raise LookupError("customer 7 is gone")

    _finished(storage, fail, "o-2")
    code, out, _ = _job("mem://x", "orders", "o-2")
    assert code == 0
    assert "error:     LookupError: customer 7 is gone" in out
    assert "Traceback (most recent call last)" in out


def test_a_job_that_set_progress_shows_it(storage: MemoryStorage) -> None:
    def report(job: varmq.Job[Any]) -> None:
        varmq.current_job().set_progress(0.4, "rows 40 of 100")

    _finished(storage, report, "o-3")
    code, out, _ = _job("mem://x", "orders", "o-3")
    lines = dict(line.split(None, 1) for line in out.splitlines())
    assert (code, lines["progress:"]) == (0, "40% rows 40 of 100")
    code, out, _ = _job("mem://x", "orders", "o-3", "--json")
    assert json.loads(out)["progress"] == {"fraction": 0.4, "message": "rows 40 of 100"}


def test_an_unknown_job_exits_1_and_an_unknown_queue_2(storage: MemoryStorage) -> None:
    storage.new_queue("orders", keep_results=60)
    code, out, err = _job("mem://x", "orders", "nope")
    assert (code, out) == (1, "")
    assert err.startswith("varmq: queue 'orders' has no record of job 'nope' (never added")
    code, _, err = _job("mem://x", "other", "nope")
    assert code == 2 and "no queue named 'other'" in err


def test_a_sqliteq_file_shows_the_records_its_queues_keep(tmp_path: Path) -> None:
    path = tmp_path / "jobs.db"
    store = sqliteq.new(str(path))
    store.new_queue("plain").enqueue_dedup(b'{"id": "a", "status": "Created", "data": 1}', "a")
    kept = store.new_queue("kept", keep_results=60)
    kept.enqueue_dedup(b'{"id": "b", "status": "Created", "data": 2}', "b")
    taken = kept.dequeue_with_ack_id()
    assert taken is not None and kept.acknowledge_with_results([(taken[1], b'{"total": 3}')])
    store.close()
    code, out, err = _job(str(path), "plain", "a")  # added without keep_results: no record
    assert (code, out) == (1, "")
    assert "queue 'plain' has no record of job 'a'" in err and "keep_results" in err
    code, out, err = _job(str(path), "kept", "b", "--json")
    record = json.loads(out)
    assert (code, err, record["state"], record["result"]) == (0, "", "succeeded", {"total": 3})


def test_a_store_whose_queues_keep_no_records_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    class _Bare:
        """A third-party queue with counts and dead letters but no job records."""

        def __init__(self, storage: MemoryStorage) -> None:
            self._queue = storage.new_queue("orders")

        def stats(self) -> Any:
            return self._queue.stats()

    storage = MemoryStorage()
    storage.new_queue("orders")

    class _BareStore(_Store):
        def open_queue(self, name: str) -> _Bare:
            return _Bare(storage)

    adapter = types.SimpleNamespace(
        URL_SCHEMES=("bare",),
        open_url=lambda url, create=True, read_only=False: _BareStore(storage),
    )
    monkeypatch.setattr(stores, "adapter_for", lambda url: adapter)
    code, out, err = _job("bare://x", "orders", "a")
    assert (code, out) == (2, "")
    assert "queue 'orders'" in err and "keeps no job records" in err and "IJobRecords" in err
