"""What lock-free takers hold: the record of the in-memory jobs taken and not settled yet, which a
snapshot freezes to see every job in exactly one place.

A worker whose only queue is a built-in in-memory one lets its threads take from it without the
dispatcher's lock (the fast path, :mod:`varmq.engine.fastpath`). A snapshot
(:mod:`varmq.api.snapshots`) must still see every job of the queue once: waiting, taken,
delayed or dead. :class:`TakenJobs` is how: the jobs taken under the lock are in its ``jobs``,
those taken lock-free in each taking thread's :class:`Taker`, and :meth:`TakenJobs.frozen`
keeps the takers off while the snapshot copies. No I/O here.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any

__all__ = ["GIL", "TAKING", "TakenJobs", "Taker"]

GIL: bool = getattr(sys, "_is_gil_enabled", lambda: True)()
"""Whether the GIL serialises C-level operations (False on free-threaded builds)."""


TAKING: Any = object()
"""What a :class:`Taker` holds between its dequeue and its claim."""


class Taker:
    """What one thread taking lock-free from a queue holds: ``job`` is the handle it took last
    (possibly settled since), :data:`TAKING` from the moment it dequeues until it knows what it
    took, or ``None``."""

    __slots__ = ("job", "registered")

    def __init__(self) -> None:
        self.job: Any = None
        #: The records it is registered in (the thread unregisters from each when it ends).
        self.registered: list[TakenJobs] = []


class TakenJobs:
    """Job handles of one in-memory queue taken from its storage and not settled yet.

    A job is taken in one of two ways, so it is recorded in one of two places:

    - under the worker's dispatcher lock (:meth:`varmq.sources.memory.MemorySource.take_now`): in
      ``jobs``, a dict used as an ordered set, until it is settled;
    - by a thread taking lock-free (:func:`varmq.engine.fastpath.run_backlog`): in that
      thread's :class:`Taker`, registered in ``takers`` while the thread takes this way. Per
      job the thread sets :data:`TAKING`, then reads ``cutting`` and backs off to the locked
      path if it is set,
      then dequeues, claims and stores the handle. Single stores, loads and dict/set
      operations are atomic under the GIL; without it there is no lock-free path (see
      ``MemorySource.lock_free_queue``).

    :meth:`frozen` (called with the dispatcher lock held, so no locked take runs) sets
    ``cutting`` and then waits until no taker holds :data:`TAKING`. A thread either saw
    ``cutting`` and backed off, or set :data:`TAKING` before ``cutting`` was set and is waited
    for: either way no job is between the storage and this record while the block runs. A
    settled job is moved on (delayed, dead) before it is removed from here, so it is never in
    neither place; a taker keeps its last handle after it settled, so readers skip handles that
    are closed or found elsewhere.
    """

    __slots__ = ("cutting", "jobs", "takers")

    def __init__(self) -> None:
        self.jobs: dict[Any, None] = {}
        self.takers: set[Taker] = set()
        self.cutting = False

    @contextlib.contextmanager
    def frozen(self) -> Iterator[list[Any]]:
        """Keep lock-free takers off and give every recorded handle, in take order for those
        taken under the lock. Call with the dispatcher lock held."""
        self.cutting = True
        try:
            while True:
                held = [taker.job for taker in list(self.takers)]
                if not any(job is TAKING for job in held):
                    break
                # A thread is between its dequeue and its claim, a few bytecodes long: yield
                # the GIL to it (it never waits for the dispatcher lock we hold).
                time.sleep(0)
            yield [*self.jobs, *(job for job in held if job is not None)]
        finally:
            self.cutting = False
