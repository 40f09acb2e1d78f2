"""The adds of one ``Queues``: group-committed for threads, and on a writer thread for coroutines.

A coroutine must not block its event loop on SQLite, and a burst of ``enqueue_async`` calls
(one per request a web service serves) should cost one transaction, not one each. So the adds
coroutines make go to one small thread of the ``Queues`` (``sqliteq:writer``, started by the
first one): it takes every add waiting for it, stores them through the same
:class:`~sqliteq._group.Adds` as the threads' adds (so they may share a transaction
with those too) and completes the awaiting futures on their own loops with
``loop.call_soon_threadsafe``, one call per loop and batch.

``close()`` stores what was already handed to the thread, then stops it: no caller is left
waiting. An add made after ``close()`` is refused (``False``) like a blocking add on a closed
file. A cancelled ``enqueue_async`` does not take its job back once the thread has it: the job
may be stored all the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import weakref
from collections.abc import Sequence

from ._database import Database
from ._group import Add, Adds

__all__ = ["Writer"]

# One waiting add: the add, its future, and the loop that awaits it.
_Waiting = tuple[Add, "asyncio.Future[bool]", asyncio.AbstractEventLoop]


class Writer:
    """Stores the adds of one ``Queues``: :meth:`store` for threads, :meth:`store_async` for
    coroutines."""

    def __init__(self, db: Database) -> None:
        self.group = Adds(db)
        self._path = db.path
        # Protects _waiting, _thread and _closed; notified when the first add waits.
        self._cond = threading.Condition(threading.Lock())
        self._waiting: list[_Waiting] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        _instances.add(self)

    def store(self, adds: Sequence[Add]) -> Sequence[bool]:
        """Store ``adds`` from this thread, maybe in one transaction with other callers' adds."""
        return self.group.store(adds)

    async def store_async(self, add: Add) -> bool:
        """Store ``add`` on the writer thread; ``False`` once closed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        with self._cond:
            if self._closed:
                return False
            self._waiting.append((add, future, loop))
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="sqliteq:writer", daemon=True
                )
                self._thread.start()
            elif len(self._waiting) == 1:  # the thread may be asleep: nothing was waiting
                self._cond.notify()
        return await future

    def close(self) -> None:
        """Store the adds already handed over, then stop the thread. Idempotent."""
        with self._cond:
            self._closed = True
            thread = self._thread
            self._cond.notify()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._waiting and not self._closed:
                    self._cond.wait()
                waiting, self._waiting = self._waiting, []
            if not waiting:
                return  # closed, and nothing left to store
            self._store(waiting)

    def _store(self, waiting: list[_Waiting]) -> None:
        """Store one batch and hand each future its answer (or the batch's error)."""
        answers: Sequence[bool] = ()
        error: BaseException | None = None
        try:
            answers = self.group.store([add for add, _, _ in waiting])
        except BaseException as exc:  # every add of the batch hears it, none is left waiting
            error = exc
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[bool], bool]]] = {}
        for index, (_, future, loop) in enumerate(waiting):
            answer = answers[index] if error is None else False
            by_loop.setdefault(loop, []).append((future, answer))
        for loop, settled in by_loop.items():
            # RuntimeError: the loop was closed, nobody awaits these any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, settled, error)

    def _forked(self) -> None:
        """In a fork child: the parent's thread is not here, nor are its loops' adds."""
        self._cond = threading.Condition(threading.Lock())
        self._waiting = []
        self._thread = None


def _settle(settled: list[tuple[asyncio.Future[bool], bool]], error: BaseException | None) -> None:
    """On the awaiting loop: give each future its answer, unless its caller gave up."""
    for future, answer in settled:
        if future.done():  # cancelled
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(answer)


# Every Writer of the process, reset in a fork child (see _forked).
_instances: weakref.WeakSet[Writer] = weakref.WeakSet()


def _after_fork() -> None:
    for writer in list(_instances):
        writer._forked()


os.register_at_fork(after_in_child=_after_fork)
