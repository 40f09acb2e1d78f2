"""Group commit: the writes that many threads ask for at the same time share one storage call.

Most of a write's cost is its round trip or its transaction, not its size. :class:`GroupCommit`
lets concurrent callers pay it once between them, leader/follower style, without making anyone
wait for a batch to fill:

- a caller that finds no write under way writes at once, alone: it is the *leader*;
- a caller that arrives while a write is under way waits (a *follower*); when the write
  returned, the leader gives every caller of that write its answers and, if callers are
  waiting, either writes their items too (up to ``rounds`` writes in all) or hands the lead
  to the oldest of them, which writes every item that gathered meanwhile.

The write function receives ``gather``: calling it takes the items waiting at that moment
(up to ``max_batch``), so a writer that must first acquire a lock (a SQLite write lock, say)
gathers once it holds it and includes what arrived while it waited. Each caller gets exactly
the answers of its own items, in order; when the write raises, every caller of that write
gets the exception (a write is one atomic call: all of it happened or none).

:meth:`GroupCommit.post` is the same without waiting: the item joins the next write, and the
caller goes on (the write reports what it must itself). A poster that finds no write under way
leads: it writes until nothing is waiting. Posts with ``send=False`` wait for the next write
someone makes (a :meth:`GroupCommit.flush`, or any other caller's write).

``lock`` (one per instance) guards the waiting items, whether a leader writes, and the count
of items not yet answered (:attr:`GroupCommit.unanswered`). Nothing holds it during a write.
In a child forked while a write was under way, the state starts afresh (the threads of that
write do not exist there).
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

__all__ = ["GroupCommit", "Write"]

T = TypeVar("T")
R = TypeVar("R")

Write = Callable[[Callable[[], list[T]]], Sequence[R]]
"""``write(gather)``: takes the waiting items by calling ``gather()`` (once; a second call gives
the same items), stores them in one call, and returns one answer per item, in order."""


class _Call(Generic[T, R]):
    """One caller's items, and what it is told: its answers, its error, or to lead."""

    __slots__ = ("answers", "error", "gate", "items", "lead", "written")

    def __init__(self, items: Sequence[T]) -> None:
        self.items = items
        self.answers: Sequence[R] = ()
        self.error: BaseException | None = None
        self.lead = False
        self.written = False
        # Held while a follower waits; released once, to answer it or to make it lead. None
        # for a leader and for a post: nobody waits at it.
        self.gate: threading.Lock | None = None


class GroupCommit(Generic[T, R]):
    """Concurrent writes through ``write``, one storage call per group (see the module)."""

    def __init__(self, write: Write[T, R], *, max_batch: int = 0, rounds: int = 1) -> None:
        """``max_batch``: at most this many items per write (0: no limit); ``rounds``: writes a
        leader makes for the callers waiting before it hands the lead on."""
        self._write = write
        self._max_batch = max_batch
        self._rounds = max(rounds, 1)
        self._reset()
        _LIVE.add(self)

    def _reset(self) -> None:
        """A fresh state: at creation, and in a forked child."""
        self.lock = threading.Lock()
        self._waiting: list[_Call[T, R]] = []
        self._leading = False
        #: Items handed in and not answered yet (waiting, or in a write under way).
        self.unanswered = 0

    def submit(self, items: Sequence[T]) -> Sequence[R]:
        """Write ``items`` (at once, or with other callers' items) and return their answers;
        raises the exception of the write that took them."""
        call: _Call[T, R] = _Call(items)
        with self.lock:
            self._waiting.append(call)
            self.unanswered += len(items)
            if self._leading:
                call.gate = threading.Lock()
                call.gate.acquire()
            else:
                self._leading = True
        if call.gate is not None:
            try:
                call.gate.acquire()  # released by the leader that wrote us, or to make us lead
            except BaseException:  # interrupted (Ctrl-C): nobody may wait for us to lead
                self._abandon(call)
                raise
        if call.gate is None or call.lead:
            self._lead(call)
        if call.error is not None:
            raise call.error
        return call.answers

    def post(self, items: Sequence[T], *, send: bool = True) -> bool:
        """Hand ``items`` to the next write without waiting for their answers. With ``send``
        and no write under way, lead: write until nothing is waiting. Whether it led."""
        with self.lock:
            self._waiting.append(_Call(items))
            self.unanswered += len(items)
            if self._leading or not send:
                return False
            self._leading = True
        self._lead(None)
        return True

    def flush(self) -> bool:
        """Write what is waiting, unless a write is under way (it writes it next); whether
        this call led."""
        with self.lock:
            if self._leading or not self._waiting:
                return False
            self._leading = True
        self._lead(None)
        return True

    def _lead(self, own: _Call[T, R] | None) -> None:
        """Write the waiting items (``own`` among them) until nothing waits; after ``rounds``
        writes, hand the lead to the oldest waiting caller instead, once ``own`` is written."""
        rounds = 0
        try:
            while True:
                self._write_once(own)
                rounds += 1
                with self.lock:
                    if not self._waiting:
                        self._leading = False
                        return
                    if rounds >= self._rounds and (own is None or own.written):
                        follower = self._follower_locked()
                        if follower is not None:  # it writes the rest; posts wait for nobody
                            follower.lead = True
                            follower.gate.release()  # type: ignore[union-attr]
                            return
        except BaseException:
            self._hand_on()  # this thread is interrupted: the lead must not be lost
            raise

    def _write_once(self, own: _Call[T, R] | None) -> None:
        """One write of the items waiting when ``gather`` is called; answer each caller."""
        batch: list[_Call[T, R]] = []
        taken: list[T] | None = None

        def gather() -> list[T]:
            nonlocal taken
            if taken is None:
                with self.lock:
                    batch.extend(self._take_locked())
                taken = [item for call in batch for item in call.items]
            return taken

        answers: Sequence[R] = ()
        error: BaseException | None = None
        try:
            answers = self._write(gather)
            if len(answers) != len(gather()):
                raise RuntimeError(f"a write answered {len(answers)} times for {len(gather())}")
        except BaseException as exc:  # every caller of the write hears it, the leader too
            error = exc
            gather()  # the write failed before it took them: the waiting hear it too
        start = 0
        for call in batch:
            stop = start + len(call.items)
            call.answers, call.error, call.written = answers[start:stop], error, True
            start = stop
        with self.lock:
            self.unanswered -= start
        for call in batch:
            if call is not own and call.gate is not None:
                call.gate.release()

    def _take_locked(self) -> list[_Call[T, R]]:
        """The waiting calls of the next write: all of them, or those of the first
        ``max_batch`` items (at least one call)."""
        waiting = self._waiting
        if not self._max_batch:
            self._waiting = []
            return waiting
        count = end = 0
        limit = self._max_batch
        while end < len(waiting) and (end == 0 or count + len(waiting[end].items) <= limit):
            count += len(waiting[end].items)
            end += 1
        taken, self._waiting = waiting[:end], waiting[end:]
        return taken

    def _follower_locked(self) -> _Call[T, R] | None:
        """The oldest caller waiting for its answers (posts wait for nobody)."""
        return next((call for call in self._waiting if call.gate is not None), None)

    def _hand_on(self) -> None:
        """Give the lead to the oldest waiting caller, or give it up."""
        with self.lock:
            follower = self._follower_locked()
            if follower is None:
                self._leading = False
            else:
                follower.lead = True
                follower.gate.release()  # type: ignore[union-attr]

    def _abandon(self, call: _Call[T, R]) -> None:
        """A follower that stops waiting: its items leave if no write took them yet, and if it
        was just made leader, the lead goes on."""
        with self.lock:
            if call in self._waiting:
                self._waiting.remove(call)
                self.unanswered -= len(call.items)
            lead = call.lead
        if lead:
            self._hand_on()


# Every group commit of the process, reset in a fork child.
_LIVE: weakref.WeakSet[GroupCommit[Any, Any]] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for live in list(_LIVE):
        live._reset()


os.register_at_fork(after_in_child=_after_fork_in_child)
