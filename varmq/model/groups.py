"""Group jobs: the handle ``add_all`` returns, tracking many jobs as one."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import AsyncIterator, Generator, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from .loops import resolve

__all__ = [
    "EnqueuedErrGroupJob",
    "EnqueuedGroupJob",
    "EnqueuedResultGroupJob",
    "Group",
    "Item",
    "Result",
]

T = TypeVar("T")
R = TypeVar("R")


@dataclass(frozen=True)
class Item(Generic[T]):
    """One job for ``add_all``: its data, priority (priority queues only) and optional id."""

    data: T
    priority: int = 0
    id: str | None = None


@dataclass(frozen=True)
class Result(Generic[R]):
    """The outcome of one member of a result group: ``data`` or ``err``."""

    job_id: str
    data: R | None
    err: BaseException | None


_END = object()


class Group:
    """Shared state of the members of one ``add_all``: pending count and outcome stream.

    Coroutines wait on it without a thread: each waiting coroutine leaves a future of its own
    loop in ``_waiters``, resolved (through its loop) when a member closes.
    """

    __slots__ = ("_done", "_ended", "_lock", "_outcomes", "_pending", "_waiters", "_wants")

    def __init__(self, size: int, wants: str) -> None:
        # Guards _pending and _waiters; the outcome stream is a thread-safe queue of its own.
        self._lock = threading.Lock()
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._pending = size
        self._done = threading.Event()
        # "errs", "results" or "" (plain groups keep no outcomes).
        self._wants = wants
        self._outcomes: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._ended = False
        if size == 0:
            self._finish()

    def member_done(self, job_id: str, value: Any, error: BaseException | None, ran: bool) -> None:
        """Count one member as closed with its outcome; ``ran`` is False for cancelled or
        refused members, whose outcome is not reported."""
        if ran and self._wants:
            if self._wants == "results":
                self._outcomes.put(Result(job_id, None if error is not None else value, error))
            elif error is not None:
                self._outcomes.put(error)
        with self._lock:
            if self._pending == 0:
                return
            self._pending -= 1
            last = self._pending == 0
        if last:
            self._finish()
        else:
            self._wake()

    def _finish(self) -> None:
        self._outcomes.put(_END)
        self._done.set()
        self._wake()

    def _wake(self) -> None:
        """Resolve the futures of the coroutines waiting for a member (any thread)."""
        with self._lock:
            waiting, self._waiters = self._waiters, []
        for loop, future in waiting:
            with contextlib.suppress(RuntimeError):  # that loop is closed: nobody to wake
                loop.call_soon_threadsafe(resolve, future)

    async def _changed(self) -> None:
        """Wait, on the running loop, until a member closes (or return at once if all did)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._lock:
            # An outcome put before this look would have woken nobody: check for one.
            if self._pending == 0 or not self._outcomes.empty():
                return
            self._waiters.append((loop, future))
        await future

    async def wait_async(self) -> None:
        """Wait until every member closed, without a thread."""
        while not self._done.is_set():
            await self._changed()

    async def outcomes_async(self) -> AsyncIterator[Any]:
        """:meth:`outcomes` for a coroutine: each outcome given out once, in closing order."""
        if self._ended:
            return
        while True:
            try:
                item = self._outcomes.get_nowait()
            except queue.Empty:
                await self._changed()
                continue
            if item is _END:
                self._ended = True
                return
            yield item

    @property
    def pending(self) -> int:
        return self._pending

    def wait(self, timeout: float | None) -> bool:
        return self._done.wait(timeout)

    def outcomes(self) -> Iterator[Any]:
        """Yield outcomes as members close; ends after the last. Each is given out once."""
        if self._ended:
            return
        while True:
            item = self._outcomes.get()
            if item is _END:
                self._ended = True
                return
            yield item


class EnqueuedGroupJob:
    """Handle of the jobs of one ``add_all``."""

    __slots__ = ("_group", "jobs")

    def __init__(self, group: Group, jobs: list[Any]) -> None:
        self._group = group
        #: The member job handles, in the order of the items (refused items excluded).
        self.jobs = jobs

    def num_pending(self) -> int:
        """Members not yet closed."""
        return self._group.pending

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every member closed; ``False`` if ``timeout`` seconds passed first."""
        return self._group.wait(timeout)

    def __await__(self) -> Generator[Any, None, None]:
        """Wait for every member from asyncio code, without parking a thread."""
        return self._group.wait_async().__await__()


class EnqueuedErrGroupJob(EnqueuedGroupJob):
    """Handle of an err worker's ``add_all``: also the members' exceptions."""

    __slots__ = ()

    def errs(self) -> Iterator[BaseException]:
        """Yield each member's exception as it happens; ends when every member closed."""
        return self._group.outcomes()

    def errs_async(self) -> AsyncIterator[BaseException]:
        """:meth:`errs` as an async iterator: ``async for exc in group.errs_async()``."""
        return self._group.outcomes_async()


class EnqueuedResultGroupJob(EnqueuedGroupJob, Generic[R]):
    """Handle of a result worker's ``add_all``: also every member's outcome."""

    __slots__ = ()

    def results(self) -> Iterator[Result[R]]:
        """Yield a :class:`Result` per member that ran, in completion order."""
        return self._group.outcomes()

    def results_async(self) -> AsyncIterator[Result[R]]:
        """:meth:`results` as an async iterator: ``async for r in group.results_async()``."""
        return self._group.outcomes_async()
