"""Shared fixtures for the core worker tests: stop every worker a test made, job gates, and a
reference storage.

Every worker created during a test (by any constructor) is recorded; after the test, every gate
is opened, every started worker is stopped and waited for, and the test fails if a worker did
not reach ``Stopped`` or left a ``varmq:`` thread running.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import varmq
from varmq.api.worker import BaseWorker
from varmq.testing import MemoryStorage

WAIT = 10.0  # seconds any single wait in a test may take before it counts as a hang


class Gate:
    """A job function whose jobs block until :meth:`open`; it records what started and ended.

    ``fn`` (threads) and ``afn`` (``async def``) return the job's data. ``peak`` is the largest
    number of jobs that were inside the function at the same time.
    """

    def __init__(self) -> None:
        self._opened = threading.Event()
        # Guards started, ended, inside and peak; notified on every change.
        self._cond = threading.Condition()
        self.started: list[Any] = []
        self.ended: list[Any] = []
        self.inside = 0
        self.peak = 0

    def _enter(self, job: varmq.Job[Any]) -> None:
        with self._cond:
            self.started.append(job.data)
            self.inside += 1
            self.peak = max(self.peak, self.inside)
            self._cond.notify_all()

    def _leave(self, job: varmq.Job[Any]) -> None:
        with self._cond:
            self.ended.append(job.data)
            self.inside -= 1
            self._cond.notify_all()

    def fn(self, job: varmq.Job[Any]) -> Any:
        self._enter(job)
        try:
            self._opened.wait(WAIT)
        finally:
            self._leave(job)
        return job.data

    async def afn(self, job: varmq.Job[Any]) -> Any:
        self._enter(job)
        try:
            while not self._opened.is_set():
                # The worker's loop stays free: other jobs of this worker can start meanwhile.
                await asyncio.get_running_loop().run_in_executor(None, self._opened.wait, 0.05)
        finally:
            self._leave(job)
        return job.data

    def open(self) -> None:
        self._opened.set()

    @property
    def is_open(self) -> bool:
        return self._opened.is_set()

    def wait_started(self, n: int, timeout: float = WAIT) -> bool:
        """Wait until at least ``n`` jobs entered the function."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self.started) >= n, timeout)

    def wait_ended(self, n: int, timeout: float = WAIT) -> bool:
        """Wait until at least ``n`` jobs left the function."""
        with self._cond:
            return self._cond.wait_for(lambda: len(self.ended) >= n, timeout)


class Recorder:
    """A job function that records the data of every job it ran, in order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # guards ran
        self.ran: list[Any] = []

    def fn(self, job: varmq.Job[Any]) -> Any:
        with self._lock:
            self.ran.append(job.data)
        return job.data

    async def afn(self, job: varmq.Job[Any]) -> Any:
        return self.fn(job)


def poll_until(predicate: Callable[[], bool], timeout: float = WAIT, every: float = 0.01) -> bool:
    """Poll a gauge until ``predicate`` holds; ``False`` when ``timeout`` ran out."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(every)


@pytest.fixture
def _gates() -> list[Gate]:
    """Every gate a test made; opened when the test ends, before its workers are stopped."""
    return []


@pytest.fixture
def gate(_gates: list[Gate]) -> Callable[[], Gate]:
    """Make a :class:`Gate`."""

    def make() -> Gate:
        g = Gate()
        _gates.append(g)
        return g

    return make


@pytest.fixture
def recorder() -> Recorder:
    """A :class:`Recorder`."""
    return Recorder()


@pytest.fixture
def storage() -> Iterator[MemoryStorage]:
    """A fresh reference storage (:class:`varmq.testing.MemoryStorage`), closed afterwards."""
    store = MemoryStorage()
    yield store
    store.close()


@pytest.fixture
def poll() -> Callable[..., bool]:
    """:func:`poll_until`, for gauges that have no wait of their own."""
    return poll_until


@pytest.fixture(autouse=True)
def _stop_workers(
    monkeypatch: pytest.MonkeyPatch, _gates: list[Gate]
) -> Iterator[list[BaseWorker[Any, Any, Any]]]:
    """Record every worker the test creates and stop it afterwards; fail on leaked threads."""
    created: list[BaseWorker[Any, Any, Any]] = []
    original = BaseWorker.__init__

    @functools.wraps(original)  # the signature stays the real one (test_docs_tables reads it)
    def recording_init(self: BaseWorker[Any, Any, Any], *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        created.append(self)

    monkeypatch.setattr(BaseWorker, "__init__", recording_init)
    yield created
    for g in _gates:
        g.open()
    stuck = []
    for worker in created:
        if worker.status in (varmq.Status.INITIATED, varmq.Status.STOPPED):
            continue
        with contextlib.suppress(varmq.VarMQError):
            worker.stop()
        if not worker.wait_until_stopped(WAIT):
            stuck.append(repr(worker))
    assert not stuck, f"workers did not stop: {stuck}"
    assert poll_until(lambda: not _varmq_threads(), timeout=WAIT), (
        f"threads left running: {_varmq_threads()}"
    )


def _varmq_threads() -> list[str]:
    # The producer pool (add_async on storage without async calls) is the process's own,
    # kept for reuse; every other varmq thread belongs to a worker and must end with it.
    return [
        t.name
        for t in threading.enumerate()
        if t.name.startswith("varmq:") and not t.name.startswith("varmq:producer") and t.is_alive()
    ]
