"""Damaged and replaced files: refused at open, loud while open, and no confirmed job lost.

A damaged file makes takes raise (the worker reports ``FailedToDequeueError``); the open check
refuses a file that lost its last byte; a process notices that its path names another file (or
none) and then refuses adds, while jobs already in the file it has open can still be finished.
"""

from __future__ import annotations

import logging
import os
import signal
import sqlite3
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import sqliteq
import varmq
from tests.adapters.sqliteq.conftest import corrupt_jobs_pages, read_until, spawn_actor


def _files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir())}


def _filled(path: Path, count: int = 10) -> Path:
    with sqliteq.new(path) as store:
        q = store.new_queue("work")
        for i in range(count):
            q.enqueue(f"job-{i}")
    return path


def test_a_file_missing_its_last_byte_is_refused_untouched(tmp_path: Path) -> None:
    path = _filled(tmp_path / "jobs.db")
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - 1)
    before = _files(tmp_path)
    with pytest.raises(sqliteq.CorruptDatabaseError, match="truncated"):
        sqliteq.new(path)
    with pytest.raises(sqliteq.CorruptDatabaseError, match="truncated"):
        sqliteq.open_url(str(path), read_only=True)
    assert _files(tmp_path) == before


def test_a_file_missing_its_last_page_is_refused(tmp_path: Path) -> None:
    path = _filled(tmp_path / "jobs.db", 500)
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - 4096)
    with pytest.raises(sqliteq.CorruptDatabaseError, match="header says"):
        sqliteq.new(path)


def _stale_sizes(path: Path, monkeypatch: pytest.MonkeyPatch, stale: int) -> None:
    """The next ``stale`` stats of ``path`` see it a few pages long (1, 2, 3, 1, ... pages: each
    one another size), as a process does that read its size while another process's
    checkpoint grew it (the header it reads counts every page); later ones see it as it is."""
    real_stat = os.stat
    left = [stale]

    def stat(target: object, *args: object, **kwargs: object) -> os.stat_result:
        result = real_stat(target, *args, **kwargs)  # type: ignore[arg-type]
        if left[0] and os.fspath(target) == str(path):  # type: ignore[arg-type]
            left[0] -= 1
            fields = list(result)
            fields[6] = 4096 * (1 + left[0] % 3)  # st_size (a stat_result made from a tuple
            return os.stat_result(fields)  # has no st_mtime_ns)
        return result

    monkeypatch.setattr(os, "stat", stat)


def test_a_file_that_grew_while_it_was_checked_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _filled(tmp_path / "jobs.db", 500)
    assert path.stat().st_size > 3 * 4096
    _stale_sizes(path, monkeypatch, stale=1)  # the first look only
    with sqliteq.new(path) as store:
        assert len(store.new_queue("work")) == 500


def test_a_file_that_changes_at_every_look_is_left_to_sqlites_own_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _filled(tmp_path / "jobs.db", 500)
    _stale_sizes(path, monkeypatch, stale=1_000)  # the whole open sees the size change
    with sqliteq.new(path) as store:
        assert len(store.new_queue("work")) == 500


def test_a_worker_on_a_file_damaged_while_open_reports_failed_to_dequeue(
    tmp_path: Path,
) -> None:
    path = _filled(tmp_path / "jobs.db", 2000)
    store = sqliteq.new(path)
    source = store.new_queue("work")
    corrupt_jobs_pages(path)
    # Another connection commits, so this one reads the file again instead of its cache.
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("UPDATE queues SET enqueued = enqueued")
    other.close()
    ran: list[object] = []
    worker = varmq.new_worker(ran.append, 1, poll_interval=0.05)
    worker.with_persistent_queue(source)
    try:
        error = worker.errs().get(timeout=10)
    finally:
        worker.stop_and_wait()
        store.close()
    assert isinstance(error, varmq.FailedToDequeueError)
    assert "corrupt" in str(error) and str(path) in str(error)
    assert ran == []


@pytest.mark.parametrize("how", ["replaced", "deleted"])
def test_adds_are_refused_once_the_path_names_another_file_and_old_jobs_still_finish(
    tmp_path: Path, how: str, caplog: pytest.LogCaptureFixture
) -> None:
    path = _filled(tmp_path / "jobs.db", 3)
    other = _filled(tmp_path / "other.db", 0)
    store = sqliteq.new(path)
    q = store.new_queue("work")
    _, ack_id = q.dequeue_with_ack_id()
    if how == "replaced":
        os.replace(other, path)  # mv other.db jobs.db
    else:
        path.unlink()  # rm jobs.db
    with caplog.at_level(logging.ERROR, logger="sqliteq"):
        for _ in range(2):
            with pytest.raises(sqliteq.ReplacedDatabaseError, match=how) as raised:
                q.enqueue(b"new")
            assert isinstance(raised.value, sqliteq.StorageUnavailableError)
            assert str(path) in str(raised.value)
    assert sum(r.levelno == logging.ERROR for r in caplog.records) == 1
    assert q.acknowledge(ack_id) is True  # work already in the open file is finished
    assert len(q.dequeue_batch_with_ack_ids(5)) == 2
    store.close()


class _Started:
    """Reads the lines of consumer processes on threads; ``wait_for`` the jobs they started."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.ready = 0
        self.ids: set[str] = set()

    def follow(self, process: subprocess.Popen[str]) -> None:
        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                with self._cond:
                    if line.startswith("start "):
                        self.ids.add(line.split()[1])
                    elif line.startswith("ready"):
                        self.ready += 1
                    self._cond.notify_all()

        threading.Thread(target=read, daemon=True).start()

    def wait_for(self, test: Callable[[], bool], timeout: float = 60) -> bool:
        with self._cond:
            return self._cond.wait_for(test, timeout)


@pytest.mark.parametrize("how", ["mv other.db jobs.db", "rm jobs.db"])
def test_producers_adds_raise_after_the_file_is_replaced_and_no_confirmed_job_is_lost(
    tmp_path: Path, how: str
) -> None:
    path, log = tmp_path / "jobs.db", tmp_path / "log"
    _filled(path, 0)
    other = _filled(tmp_path / "other.db", 0)
    started = _Started()
    consumers = [spawn_actor("work", str(path), str(log), "30", "0") for _ in range(2)]
    for consumer in consumers:
        started.follow(consumer)
    producers: list[subprocess.Popen[str]] = []
    try:
        assert started.wait_for(lambda: started.ready == 2)
        producers = [spawn_actor("produce", str(path), str(log)) for _ in range(2)]
        for producer in producers:
            read_until(producer, "ready")
        if how.startswith("mv"):
            os.replace(other, path)
        else:
            path.unlink()
        for producer in producers:
            _, err = producer.communicate(timeout=120)
            assert producer.returncode == 0, err
        lines = log.read_text().splitlines()
        confirmed = {line.split()[1] for line in lines if line.startswith("ok ")}
        refused = [line.split() for line in lines if line.startswith("raised ")]
        assert confirmed and len(refused) == 40
        assert {kind for _, _, kind in refused} == {"ReplacedDatabaseError"}
        # The consumers still drain the file they have open: every confirmed job starts.
        assert started.wait_for(lambda: confirmed <= started.ids), confirmed - started.ids
    finally:
        for process in consumers + producers:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in consumers:
            process.wait(timeout=60)
    runs = [line.split()[1] for line in log.read_text().splitlines() if line.startswith("start")]
    assert set(runs) == confirmed  # every confirmed job ran; nothing refused ran
    assert len(runs) == len(set(runs))
