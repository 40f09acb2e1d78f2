"""Group jobs: the handle ``add_all`` returns, tracking many jobs as one."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

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
    """Shared state of the members of one ``add_all``: pending count and outcome stream."""

    __slots__ = ("_done", "_ended", "_lock", "_outcomes", "_pending", "_wants")

    def __init__(self, size: int, wants: str) -> None:
        # Guards _pending; the outcome stream is a thread-safe queue of its own.
        self._lock = threading.Lock()
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

    def _finish(self) -> None:
        self._outcomes.put(_END)
        self._done.set()

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
        loop = asyncio.get_running_loop()
        yield from loop.run_in_executor(None, self._group.wait, None).__await__()


class EnqueuedErrGroupJob(EnqueuedGroupJob):
    """Handle of an err worker's ``add_all``: also the members' exceptions."""

    __slots__ = ()

    def errs(self) -> Iterator[BaseException]:
        """Yield each member's exception as it happens; ends when every member closed."""
        return self._group.outcomes()


class EnqueuedResultGroupJob(EnqueuedGroupJob, Generic[R]):
    """Handle of a result worker's ``add_all``: also every member's outcome."""

    __slots__ = ()

    def results(self) -> Iterator[Result[R]]:
        """Yield a :class:`Result` per member that ran, in completion order."""
        return self._group.outcomes()
