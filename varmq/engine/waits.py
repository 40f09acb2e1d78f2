"""Waiting for a worker's state: the blocking waits and the ``*_async`` ones of every worker.

Each wait is a condition on the dispatcher's state (:class:`~varmq.engine.dispatch.Dispatcher`),
evaluated under its lock: the blocking waits sleep on its condition variable, the async ones on
futures of the caller's event loop (never blocking it), resolved by
:meth:`~varmq.engine.dispatch.Dispatcher.notify_locked`. Storage lengths can change without
anyone here noticing (other processes), so every wait looks again at least every poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..model.loops import LOOP_THREAD

if TYPE_CHECKING:
    from .dispatch import Dispatcher

__all__ = ["wait_for", "wait_for_async"]


async def wait_for_async(
    dispatch: Dispatcher, predicate: Callable[[], bool], timeout: float | None
) -> bool:
    """:func:`wait_for` for a coroutine: the event loop is never blocked while it waits."""
    dispatch.check_process()
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with dispatch.lock:
            if predicate():
                return True
            future: asyncio.Future[None] = loop.create_future()
            dispatch.async_waiters.append((loop, future))
            dispatch.waiters += 1
        remaining = dispatch.poll_interval
        if deadline is not None:
            remaining = min(remaining, deadline - time.monotonic())
        try:
            if remaining > 0:
                await asyncio.wait({future}, timeout=remaining)
        finally:
            with dispatch.lock:
                dispatch.waiters -= 1
                with contextlib.suppress(ValueError):
                    dispatch.async_waiters.remove((loop, future))
        if deadline is not None and time.monotonic() >= deadline:
            with dispatch.lock:
                return predicate()


def wait_for(dispatch: Dispatcher, predicate: Callable[[], bool], timeout: float | None) -> bool:
    """Wait until ``predicate`` (evaluated under the dispatcher's lock) holds; False on timeout.

    A thread that runs the worker's jobs (or the loop that runs them) is refused: it would wait
    for itself.
    """
    dispatch.check_process()
    if LOOP_THREAD.dispatch is dispatch:
        raise RuntimeError(
            f"varmq: worker {dispatch.name}: a blocking wait from one of its own jobs, or from "
            "the event loop that runs them, would wait for itself; in async code use the "
            "*_async waits (await worker.wait_async())"
        )
    deadline = None if timeout is None else time.monotonic() + timeout
    with dispatch.changed:
        while not predicate():
            if deadline is None:
                remaining = dispatch.poll_interval
            else:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                remaining = min(remaining, dispatch.poll_interval)
            dispatch.waiters += 1
            try:
                dispatch.changed.wait(remaining)
            finally:
                dispatch.waiters -= 1
        return True
