"""Event loops and the threads that run jobs: what a blocking wait must look at first, and how
a thread wakes a coroutine waiting on another loop.

A thread that runs a worker's jobs (or the event loop that runs its ``async def`` jobs) must
never block waiting on that worker or on one of its jobs: it could wait for itself.
:data:`LOOP_THREAD` says which worker's jobs the current thread runs; :data:`LOOP_IDENTS` which
threads run event loops with jobs on them. No locks here: each thread writes only its own.
"""

from __future__ import annotations

import asyncio
import threading

__all__ = ["LOOP_IDENTS", "LOOP_THREAD", "on_a_loop", "resolve"]


class _LoopThread(threading.local):
    """Which worker's jobs the current thread runs (its event loop, or one of its threads)."""

    dispatch: object = None


#: Set in every thread that runs a worker's jobs (and the loop thread that serves them):
#: a blocking wait there, on that worker or on a job, could wait for itself for ever.
LOOP_THREAD = _LoopThread()

#: Idents of the threads that run event loops with workers' jobs on them; a blocking job
#: wait there is refused. A set, so that the check costs nothing while it is empty (always,
#: in programs without async workers).
LOOP_IDENTS: set[int] = set()


def on_a_loop() -> bool:
    """Whether the calling thread is running an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def resolve(future: asyncio.Future[None]) -> None:
    """Complete ``future`` unless its waiter gave up; call it on the future's own loop
    (``loop.call_soon_threadsafe(resolve, future)`` from another thread)."""
    if not future.done():
        future.set_result(None)
