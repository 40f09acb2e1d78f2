"""The library's producer threads: blocking storage calls made for coroutines, and the adds of
recurring jobs.

A coroutine must not block its event loop on a storage call. Where a storage has no async call
of its own (``IAsyncEnqueue``), the call runs on this small pool of the library's threads, so
that producers never use up the application's default executor; the timer hands the adds of
recurring jobs to it too, so that a storage slow to answer never delays the timer. Started on
first use and kept for the process.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

__all__ = ["in_pool", "producer_pool"]

R = TypeVar("R")

# Two threads: the calls hold the GIL for most of their time, so more threads add no adds per
# second (sqliteq: 4.5k/s with 1, 2 or 8) but make the event loop wait longer for the GIL (the
# loop-stall probe's worst tick: 2-10 ms with 1 or 2 threads, 13-18 ms with 8); the second
# keeps one slow call (a storage timing out) from holding up every other.
_PRODUCER_THREADS = 2
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()  # guards _pool's creation


def producer_pool() -> ThreadPoolExecutor:
    """The library's producer threads (started on first use, kept for the process)."""
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(_PRODUCER_THREADS, thread_name_prefix="varmq:producer")
        return _pool


async def in_pool(call: Callable[..., R], *args: Any) -> R:
    """``call(*args)`` for a coroutine, on the producer threads."""
    return await asyncio.get_running_loop().run_in_executor(producer_pool(), call, *args)
